"""search.diagnose --run-steps N (search.diagnosis.diagnosis_run_length): the skipped steps and evaluation it
states over N steps, for the diagnosed setting and the suggestion it gives, are those of independent plain
loops run N steps: GradScaler on a setting that is not a power of two, and Megatron-LM's rule (its own
transcription, tests/commands/test_optimize_scalers.py)."""

from __future__ import annotations

import json

import pytest
import torch
from test_optimize_scalers import REFERENCES

from search.scalers import RULES
from search.tasks.seed_mlp import build

from conftest import run_cli
from plain_loop import LAST_RULE_LOSSES, plain_rule_run, plain_run

RUN_STEPS = 90


@pytest.mark.parametrize(
    "scaler, flags",
    [
        ("torch", ["--init-scale", "1234.5", "--growth-factor", "1.37", "--growth-interval", "2"]),
        ("megatron", ["--scaler", "megatron"]),
    ],
)
def test_the_run_length_figures_are_the_plain_loops_over_that_length(tmp_path, scaler, flags):
    args = ["--task", "seed-mlp", *flags, "--run-steps", str(RUN_STEPS), "--json", "d.json"]
    run = run_cli(args, tmp_path, module="search.diagnose")
    assert run.returncode == 0, run.stderr
    measured = json.loads((tmp_path / "d.json").read_text())["run_length"]
    assert measured["steps"] == RUN_STEPS
    torch.set_num_threads(1)  # As the command trained; fp16 kernels differ by threads.
    problem = build(42)
    for label in ("diagnosed", "suggested"):
        if label not in measured:
            continue
        values = measured[label]["settings"]
        if scaler == "torch":
            plain = plain_run(problem, *(values[k] for k in RULES["torch"].names), RUN_STEPS)
            skipped, evaluation = plain.skipped, plain.eval_loss
        else:
            initial, next_scale = REFERENCES[scaler](values)
            skipped = sum(plain_rule_run(problem, initial, next_scale, RUN_STEPS)[1])
            evaluation = LAST_RULE_LOSSES[-1]  # seed-mlp is judged on its last step's loss (full batch)
        assert measured[label]["skipped"] == skipped, (label, measured[label])
        assert measured[label]["eval_loss"] == pytest.approx(evaluation, rel=1e-5)
        assert f" {skipped} of {RUN_STEPS} and " in run.stdout.splitlines()[-1]  # the line says it
    last = run.stdout.splitlines()[-1]
    assert last.startswith(f"    over a run of {RUN_STEPS} steps (--run-steps; measured")
    if scaler == "torch":  # Interval 2 grows 1.37x every two clean steps into seed-mlp's overflow edge.
        assert measured["diagnosed"]["skipped"] > 0


def test_a_run_length_below_1_is_one_line_and_writes_nothing(tmp_path):
    run = run_cli(["--run-steps", "0", "--json", "d.json"], tmp_path, module="search.diagnose")
    assert run.returncode == 2 and run.stderr == "search.diagnose: error: --run-steps must be >= 1, got 0\n"
    assert list(tmp_path.iterdir()) == []
    log = run_cli(["--log", "-", "--run-steps", "9"], tmp_path, module="search.diagnose")
    assert log.returncode == 2 and "--run-steps is for a training diagnosis" in log.stderr

"""search.optimize and search.confirm --run-steps N (search.study._run_length): the skipped steps and
evaluation that the summary states for the answer and the default over N steps are those of independent plain
loops run N steps, for GradScaler and each framework rule (the rule moved by the framework's own class or a
transcription, tests/commands/test_optimize_scalers.py); a bad N is one line, exit 2, nothing written."""

from __future__ import annotations

import json

import optuna
import pytest
import torch
from test_optimize_scalers import REFERENCES

from search.scalers import RULES
from search.tasks.seed_mlp import build

from conftest import run_cli
from plain_loop import LAST_RULE_LOSSES, plain_rule_run, plain_run

RUN_STEPS = 90  # Three times the trials' 30: past what a trial saw.
CONFIGS = {
    # A growth interval of 2 walks the answer into overflows at a steady rate (seed-mlp's edge is 2^19.4).
    "torch": "[space.growth_interval]\nfixed = 2\n",
    # Fairseq's default 128 never overflows seed-mlp: its sampled starts reach 2^30.
    "fairseq": "[space.fairseq.fp16_init_scale]\nlow = 64\nhigh = 1073741824\nlog = true\n",
}


def _plain(scaler: str, values: dict, problem) -> tuple[int, float]:
    """(skipped steps, evaluation) of an independent plain loop of RUN_STEPS steps."""
    if scaler == "torch":
        run = plain_run(problem, *(values[k] for k in RULES["torch"].names), RUN_STEPS)
        return run.skipped, run.eval_loss
    initial, next_scale = REFERENCES[scaler](values)
    _scales, skipped, _ended = plain_rule_run(problem, initial, next_scale, RUN_STEPS)
    return sum(skipped), LAST_RULE_LOSSES[-1]  # seed-mlp is judged on its last step's loss (full batch)


@pytest.mark.parametrize("scaler", ["torch", "deepspeed", "megatron", "fairseq"])
def test_the_run_length_figures_are_the_plain_loops_over_that_length(tmp_path, monkeypatch, scaler):
    from optuna_dashboard import get_note  # 0.8 s: not at collection, in every runner

    monkeypatch.setattr("search.study._run_parts.process_token", lambda: "tests:1")  # fixed sampled points
    args = ["--scaler", scaler, "--trials", "8", "--run-steps", str(RUN_STEPS), "--best-out", "best.json"]
    if scaler in CONFIGS:
        (tmp_path / "space.toml").write_text(CONFIGS[scaler])
        args += ["--config", "space.toml"]
    run = run_cli([*args, "--quiet"], tmp_path)
    assert run.returncode == 0, run.stderr
    measured = json.loads((tmp_path / "best.json").read_text())["run_length"]
    rule = RULES[scaler]
    assert measured["steps"] == RUN_STEPS and measured["default"]["settings"] == dict(rule.default)
    torch.set_num_threads(1)  # As trials train (the command set its own); fp16 kernels differ by threads.
    problem = build(42)
    said = []
    for label, name in (("answer", None), ("default", "the default")):
        if label not in measured:
            continue
        skipped, evaluation = _plain(scaler, measured[label]["settings"], problem)
        assert measured[label]["skipped"] == skipped, (label, measured[label])
        assert measured[label]["eval_loss"] == pytest.approx(evaluation, rel=1e-5)
        said.append(f"{name or ''}skips {skipped} of {RUN_STEPS} and ends at {evaluation:.4g}")
    line = next(x for x in run.stdout.splitlines() if x.startswith(f"    over a run of {RUN_STEPS} steps"))
    assert all(part.split("skips")[1] in line for part in said), (line, said)
    # The dashboard's study note, read with optuna-dashboard's own function, says it as the summary does.
    study = optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="seed-mlp")
    assert line in get_note(study).splitlines()
    if scaler == "torch":
        assert measured["answer"]["settings"]["growth_interval"] == 2


def test_a_run_length_below_1_is_one_line_and_writes_nothing(tmp_path):
    run = run_cli(["--trials", "2", "--run-steps", "0"], tmp_path)
    assert run.returncode == 2 and run.stderr == "search.optimize: error: --run-steps must be >= 1, got 0\n"
    assert list(tmp_path.iterdir()) == []


def test_confirm_states_the_run_length_of_its_verdict_as_the_plain_loops_run_it(tmp_path, monkeypatch):
    """search.confirm --run-steps N: under the verdict its runs leave (Megatron-LM's rule, whose default
    starts at 2^32 and backs off for its first steps), the answer's and the default's skips over N, as plain
    loops of N steps find them."""
    monkeypatch.setattr("search.study._run_parts.process_token", lambda: "tests:1")
    study = ["--scaler", "megatron", "--trials", "8", "--quiet"]
    assert run_cli(study, tmp_path).returncode == 0
    args = ["--top", "1", "--seeds", "2", "--no-corners", "--run-steps", str(RUN_STEPS), "--quiet"]
    confirm = run_cli(args, tmp_path, module="search.confirm")
    assert confirm.returncode == 0, confirm.stderr
    after = run_cli([*study, "--best-out", "after.json"], tmp_path)  # the same verdict, its settings in JSON
    assert after.returncode == 0, after.stderr
    pair = json.loads((tmp_path / "after.json").read_text())["recommended"]["side_by_side"]
    torch.set_num_threads(1)
    problem = build(42)
    over = f"    over a run of {RUN_STEPS} steps"
    line = next(x for x in confirm.stdout.splitlines() if x.startswith(over))
    default_skips, default_eval = _plain("megatron", dict(RULES["megatron"].default), problem)
    assert f"the default skips {default_skips} of {RUN_STEPS} and ends at {default_eval:.4g}" in line
    assert default_skips > 0  # it starts at 2^32: the backing off shows
    if pair["answer_setting"] is not None:
        skips, evaluation = _plain("megatron", pair["answer_setting"], problem)
        assert f" skips {skips} of {RUN_STEPS} and ends at {evaluation:.4g}; the default" in line


def test_a_task_that_declares_its_run_length_gets_the_figures_without_the_flag(tmp_path):
    """A task's ``run_steps`` (tasks_for_tests.seed_run_length: 60) stands for --run-steps: the summary says
    where N came from, and the default's figures over 60 steps are the plain loop's; the flag wins over it."""
    task = ["--task", "tasks_for_tests:seed_run_length"]
    args = [*task, "--trials", "6", "--quiet", "--best-out", "best.json"]
    run = run_cli(args, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "training the answer and the default 60 steps each (the task's run_steps)" in run.stderr
    measured = json.loads((tmp_path / "best.json").read_text())["run_length"]
    assert (measured["steps"], measured["source"]) == (60, "the task's run_steps")
    torch.set_num_threads(1)
    plain = plain_run(build(42), 2.0**16, 2.0, 0.5, 2000, 60)
    assert measured["default"]["skipped"] == plain.skipped
    assert measured["default"]["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-5)
    assert "    over a run of 60 steps (the task's run_steps; measured: each trained 60 steps" in run.stdout
    again = run_cli([*args, "--run-steps", "45"], tmp_path)  # the flag wins: the study is done, 45 measured
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "best.json").read_text())["run_length"]["steps"] == 45
    assert "    over a run of 45 steps (--run-steps; measured" in again.stdout

"""A Hugging Face causal LM trained from a DataLoader of dict batches (examples/hf_causal_lm.py), with no
wrapper: every measurement is checked against the independent plain loop (tests/plain_loader_loop.py) on
settings that are not powers of two, dropout keeps trials common random numbers, and the commands run it."""

from __future__ import annotations

import math
from dataclasses import replace

import optuna
import pytest
import torch

from search.core import SCALE_CURVE, PenaltyConfig
from search.scalers import ScalerConfig
from search.tasks import build_problem
from search.training import run_trial, train

from conftest import example_build, run_cli
from plain_loader_loop import plain_loader_run


def build(seed: int):
    """The example's build (conftest.example_build: imported when a test runs)."""
    return example_build("hf_causal_lm", "transformers")(seed)


STEPS = 12


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return build_problem(build, "examples.hf_causal_lm:build", 42)


def test_every_measurement_matches_the_plain_loop(problem):
    """Skips, scales, losses, zero share, evaluation, failure code and objective, on a setting that
    overflows at first (1.37 * 2^27, backoff 0.31) and regrows every 7 steps by 1.7."""
    config = ScalerConfig(1.37 * 2**27, 1.7, 0.31, 7)
    outcome = run_trial(
        problem, config, steps=STEPS, amp_dtype=torch.float16, penalty=PenaltyConfig(), device_label="cpu"
    )
    attrs = outcome.user_attrs
    plain = plain_loader_run(
        problem, *config.__dict__.values(), STEPS, fp32_zeros=attrs["fp32_zero_fraction"]
    )
    assert attrs["skipped_steps"] == plain.skipped > 0
    assert attrs[SCALE_CURVE] == plain.scales
    assert attrs["loss_curve"] == pytest.approx(plain.losses, rel=1e-6)
    assert attrs["zero_grad_fraction"] == pytest.approx(plain.zero_fraction, abs=5e-7)  # stored to 6 digits
    assert attrs["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-6)
    assert attrs["failure"] == plain.failure and outcome.value == pytest.approx(plain.objective, rel=1e-6)


def test_dropout_does_not_break_common_random_numbers(problem):
    """HF's dropout (0.1) draws the same masks in every trial: the same settings give bit-identical runs,
    and settings that cannot act (no skip: backoff; no growth in 12 steps: growth_factor) tie exactly."""
    assert problem.model.config.resid_pdrop == 0.1
    a = train(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), steps=STEPS)
    b = train(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), steps=STEPS)
    c = train(problem, ScalerConfig(2.0**16, 3.7, 0.23, 1500), steps=STEPS)
    assert a.skipped_steps == 0 and a.loss_curve == b.loss_curve == c.loss_curve
    assert a.eval_loss == b.eval_loss == c.eval_loss and a.scale_curve == b.scale_curve == c.scale_curve
    # The initial weights and buffers are never trained in place.
    assert train(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), steps=STEPS).eval_loss == a.eval_loss


def test_optimize_and_confirm_run_it(tmp_path):
    task = "examples.hf_causal_lm:build"
    search = run_cli(["--task", task, "--trials", "5", "--steps", "6", "--quiet"], tmp_path)
    assert search.returncode == 0, search.stderr
    assert "Study 'hf_causal_lm'" in search.stdout and "verdict:" in search.stdout
    trials = optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="hf_causal_lm").trials
    assert all(t.state.name == "COMPLETE" and math.isfinite(t.value) for t in trials)
    confirm = run_cli(
        ["--study-name", "hf_causal_lm", "--top", "1", "--seeds", "2", "--no-corners", "--quiet"],
        tmp_path,
        module="search.confirm",
    )
    assert confirm.returncode == 0, confirm.stderr


def _no_labels(seed: int):
    """The example with a collate that drops the labels: model(**batch) then computes no loss."""
    problem = build(seed)
    loader = problem.train_batches
    collate = loader.collate_fn
    unlabelled = torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=32,
        collate_fn=lambda s: {k: v for k, v in collate(s).items() if k != "labels"},
    )
    return replace(problem, train_batches=unlabelled)


def test_a_batch_the_model_cannot_compute_a_loss_for_fails_at_build_in_one_line(tmp_path, monkeypatch):
    """Once, before any trial, exit 2, nothing written: not ten FAIL trials."""
    import examples.hf_causal_lm as example

    monkeypatch.setattr(example, "no_labels", _no_labels, raising=False)
    proc = run_cli(["--task", "examples.hf_causal_lm:no_labels", "--trials", "3"], tmp_path)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "without a loss" in line and "LoaderProblem(loss=...)" in line
    assert not (tmp_path / "study.db").exists()


def test_a_diagnosis_reads_the_hf_model_step_by_step_as_the_plain_loop_trains_it(problem):
    """search.diagnose on dict batches and a ModelOutput: the fp16 run's scales and skips are the plain loop's
    on a setting that overflows at first, each skip names the parameters whose gradients overflowed, and every
    leaf module's forward output (embeddings, attention, LayerNorm) is read."""
    from search.diagnosis import diagnosis_runs, judge

    config = ScalerConfig(1.37 * 2**27, 1.7, 0.31, 7)
    runs = diagnosis_runs(problem, config, steps=STEPS)
    plain = plain_loader_run(problem, *config.__dict__.values(), STEPS)
    fp16 = runs.fp16
    assert fp16.skipped_steps == plain.skipped > 0
    assert [*fp16.scales[1:], plain.scales[-1]] == plain.scales  # the scale each backward used, then after
    assert all(
        any(step in p.overflow_steps for p in fp16.parameters) for step, s in enumerate(fp16.skipped) if s
    )
    names = {layer.name for layer in runs.fp32.layers}
    assert "transformer.wte" in names and "transformer.h.0.ln_1" in names
    unread = {layer.name for layer in runs.fp32.layers if not math.isfinite(layer.largest)}
    assert unread == {
        f"transformer.h.{i}.attn.attn_dropout" for i in (0, 1)
    }  # SDPA attention never calls them
    verdict = judge(fp16, runs.fp32, runs.bf16, config)
    assert verdict.verdict in ("healthy", "chronic-skipping") and verdict.forward_layer is None

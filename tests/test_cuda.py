"""The GPU path, checked on a CUDA device: ``python -m pytest -m cuda tests`` (bench/gpu_check.sh runs it).

README's test command deselects these (``-m "not cuda"``): CI has no GPU. Run on a machine without
CUDA they fail with one line instead of skipping, so a GPU check can never pass by running nothing.
Every measurement is compared with the independent plain loop (tests/plain_loop.py) on the device,
as tests/training/test_measurements.py does on the CPU.
"""

from __future__ import annotations

import copy
import json
import warnings

import optuna
import pytest
import torch

from search.core import PenaltyConfig
from search.scalers import ScalerConfig
from search.tasks.deep_mlp import build as build_deep
from search.tasks.seed_mlp import build as build_seed
from search.training import run_trial, train

from conftest import run_cli, run_process
from plain_loop import plain_fp32_zero_fraction, plain_run

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.fail(
            "these tests need a CUDA device (torch.cuda.is_available() is False); README's command deselects"
            " them"
        )
    return torch.device("cuda:0")


def _compare(problem, cfg: ScalerConfig, steps: int) -> tuple[dict, object]:
    fp32 = plain_fp32_zero_fraction(problem, steps)
    outcome = run_trial(
        problem,
        cfg,
        steps=steps,
        amp_dtype=torch.float16,
        penalty=PenaltyConfig(),
        device_label="cuda:0",
    )
    attrs, plain = outcome.user_attrs, plain_run(problem, *cfg.__dict__.values(), steps, fp32_zeros=fp32)
    where = f"{cfg} on {steps} steps"
    assert attrs["skipped_steps"] == plain.skipped, where
    assert attrs["scale_curve"] == plain.scales, where  # float32 values, exactly
    assert attrs["zero_grad_fraction"] == pytest.approx(plain.zero_fraction, abs=1e-6), where
    assert attrs["failure"] == plain.failure, where
    if plain.failure != "nonfinite":
        assert attrs["loss_curve"] == pytest.approx(plain.losses, rel=1e-4, abs=1e-6), where
        assert attrs["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-4), where
    assert outcome.value == pytest.approx(plain.objective, rel=1e-4), where
    return attrs, plain


@pytest.mark.parametrize(
    "cfg",
    [
        ScalerConfig(2.0**16, 2.0, 0.5, 2000),
        ScalerConfig(8.056740244482309e-05, 2.0, 0.5, 2000),  # float32 rounds it: no phantom skip
        ScalerConfig(1.37 * 2.0**27, 2.7, 0.3, 3),  # overflows, backs off, grows again
        ScalerConfig(3.3e-9, 1.9, 0.45, 2000),  # underflow
    ],
)
def test_seed_task_on_cuda_matches_the_plain_loop(cuda, cfg):
    problem = build_seed(42).to(cuda)
    attrs, _ = _compare(problem, cfg, 30)
    assert len(attrs["scale_curve"]) == 30


def test_deep_mlp_on_cuda_default_underflows_and_a_larger_scale_learns(cuda):
    problem = build_deep(42).to(cuda)
    default, _ = _compare(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), 64)
    window, _ = _compare(problem, ScalerConfig(1.37 * 2.0**19, 2.0, 0.5, 2000), 64)
    churn, _ = _compare(problem, ScalerConfig(7.3e7, 2.3, 0.61, 9), 64)
    assert default["failure"] == "underflow" and window["failure"] == "none"
    assert window["eval_loss"] < 0.5 * default["eval_loss"] and churn["skipped_steps"] > 0


def _syncs(fn) -> int:
    """Synchronising CUDA calls made by ``fn`` (torch's sync debug mode warns once per call)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def test_the_trainer_adds_no_host_sync_per_step(cuda):
    """GradScaler.step itself reads found_inf on the host once per step (unless the optimizer is fused);
    the trainer adds nothing per step to that: its syncs grow with the steps exactly as a bare AMP recipe's
    do.
    """
    problem = build_seed(42).to(cuda)
    cfg = ScalerConfig(2.0**16, 2.0, 0.5, 2000)
    for epochs in (30, 60):  # warm-up; the fp32 reference run is cached per problem and step count
        train(problem, cfg, epochs=epochs)

    def recipe(steps: int) -> None:
        model = copy.deepcopy(problem.model)
        opt = problem.make_optimizer(model.parameters())
        scaler = torch.amp.GradScaler("cuda", init_scale=cfg.init_scale)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = problem.loss_fn(model(problem.inputs), problem.targets)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    # Differences of 60 and 30 steps: per-run costs (the one host read at the end) cancel. The first
    # GPU check (2026-12-04) measured before the fp32 reference was cached for both step counts and
    # so counted the reference run's steps too (61 against 30).
    ours = min(
        _syncs(lambda: train(problem, cfg, epochs=60)) - _syncs(lambda: train(problem, cfg, epochs=30))
        for _ in range(2)
    )
    bare = min(_syncs(lambda: recipe(60)) - _syncs(lambda: recipe(30)) for _ in range(2))
    print(f"host syncs per 30 extra steps: trainer {ours}, bare AMP recipe {bare}")
    assert ours <= bare, (ours, bare)


def test_optimize_on_cuda_records_the_device_and_a_cuda_gradscaler_line(cuda, tmp_path):
    proc = run_cli(["--trials", "8", "--device", "cuda", "--quiet", "--best-out", "best.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="seed-mlp")
    devices = {t.user_attrs["device"] for t in study.trials}
    name = torch.cuda.get_device_name(0)
    assert devices == {f"cuda:0 ({name})"}, devices
    data = json.loads((tmp_path / "best.json").read_text())
    assert 'torch.amp.GradScaler("cuda"' in proc.stdout and "cuda" in data["best"]


def test_workers_on_cuda_place_every_trial_on_a_gpu(cuda, tmp_path):
    proc = run_process(["--trials", "12", "--workers", "2", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="seed-mlp")
    devices = [t.user_attrs.get("device", "") for t in study.trials if t.state.is_finished()]
    count = torch.cuda.device_count()
    assert devices and all(d.startswith("cuda:") for d in devices), devices
    assert {d.split(" ")[0] for d in devices} == {f"cuda:{i % count}" for i in range(2)}


def population_against_trainer(problem, configs: list[ScalerConfig], steps: int) -> float:
    """Population mode (issue 16) member by member against the trainer on the same device: skipped
    steps, float32 scale curves and failure codes exactly; returns the worst relative difference of
    the finite losses and evaluations (batched GEMMs may round differently from single ones)."""
    from search.training import assess, train_population

    population = train_population(
        problem, configs, epochs=problem.epochs, steps=steps, amp_dtype=torch.float16
    )
    worst = 0.0
    for cfg, member in zip(configs, population):
        ordinary = train(problem, cfg, epochs=problem.epochs, steps=steps, amp_dtype=torch.float16)
        where = f"{cfg} on {steps} steps"
        assert member.skipped == ordinary.skipped, where
        assert member.scale_curve == ordinary.scale_curve, where
        assert assess(member, PenaltyConfig()).failure == assess(ordinary, PenaltyConfig()).failure, where
        pairs = [
            (a, b)
            for a, b in zip(member.loss_curve, ordinary.loss_curve)
            if b == b and abs(b) != float("inf")
        ]
        pairs.append((member.eval_loss, ordinary.eval_loss))
        worst = max([worst] + [abs(a - b) / max(abs(b), 1e-12) for a, b in pairs])
    assert worst < 1e-3, f"worst relative loss difference {worst:.2e}"
    return worst


def test_population_members_on_cuda_equal_ordinary_trials(cuda):
    from test_population import _sampled

    seed = build_seed(42).to(cuda)
    configs = _sampled(12, seed=11, low=-20, high=40) + [
        ScalerConfig(1.787735685558448e-05, 2.548, 0.581, 19),  # underflows
        ScalerConfig(3.2393562610e8, 2.692, 0.885, 7),  # churns
        ScalerConfig(4.219e-05, 3.79, 0.156, 1),  # overflows, backs off, grows again
    ]
    worst_seed = population_against_trainer(seed, configs, 30)
    deep = build_deep(42).to(cuda)
    worst_deep = population_against_trainer(deep, _sampled(6, seed=3, low=-10, high=40), 64)
    assert worst_seed < 1e-3 and worst_deep < 1e-3
    print(
        f"\npopulation on {torch.cuda.get_device_name(cuda)}: worst relative loss difference against the "
        f"trainer: seed-mlp {worst_seed:.2e}, deep-mlp {worst_deep:.2e}"
    )


def test_diagnose_on_cuda_calls_deep_mlps_default_an_underflow_with_a_bf16_control(cuda, tmp_path):
    """The diagnosis's three runs on the GPU: its observer reads every step there (one host read a step), the
    bf16 control runs where the GPU has bf16, and the verdict is the CPU's: underflow, start at 2^20."""
    proc = run_cli(
        ["--task", "deep-mlp", "--device", "cuda", "--json", "d.json"], tmp_path, module="search.diagnose"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["device"].startswith("cuda:0") and data["verdict"] == "underflow"
    assert data["runs"]["fp16"]["failure"] == "underflow" and data["skipped_steps"] == 0
    assert ("bf16" in data["runs"]) == torch.cuda.is_bf16_supported()
    assert 2.0**19 <= data["suggested_init_scale"] <= 2.0**21

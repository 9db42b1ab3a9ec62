"""``--checkpoint``: a search and a diagnosis from the user's checkpoint, its schedule and its scaler.

The checkpoint is written by a plain PyTorch AMP loop (its scaler backed off on the way); the study's
baselines are then checked against plain loops that load it: the default started afresh (``seed-1``) and the
run as it was (``as-run``, the saved scaler continued), step by step; so is the diagnosis's fp16 run.
"""

from __future__ import annotations

import copy
import json
import math

import optuna
import pytest
import torch

from examples.late_checkpoint import write_late_checkpoint
from search.core import AS_RUN_BASELINE, DEFAULT_BASELINE, FIRST_STEP, LR_CURVE
from search.publishing.report import build_report, load_snapshot

from conftest import run_cli
from frameworks import deepspeed_scaler
from plain_resume import (
    DeepSpeedMoves,
    loaded,
    losses_of,
    plain_rule_continue,
    plain_steps,
    save_rule_run,
    write_content,
)
from tasks_for_tests import scheduled

SAVED_AT, STEPS = 20, 10
SAVING = dict(init_scale=3.3e6, growth_factor=1.7, backoff_factor=0.37, growth_interval=3)
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    problem = scheduled(42)
    model = copy.deepcopy(problem.model)
    optimizer = problem.make_optimizer(model.parameters())
    scheduler = problem.make_scheduler(optimizer)
    scaler = torch.amp.GradScaler("cpu", **SAVING)
    plain_steps(model, optimizer, scheduler, scaler, losses_of(problem, 0, SAVED_AT), 0, 42, True)
    path = tmp_path_factory.mktemp("checkpoint") / "run.pt"
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    torch.save({k: v.state_dict() for k, v in state.items()} | {"step": SAVED_AT}, path)
    return path


def scheduled_from(checkpoint) -> list:  # noqa: ANN001
    """The flags of a search of the scheduled task from ``checkpoint``, STEPS steps a trial."""
    return ["--task", "tasks_for_tests:scheduled", "--checkpoint", checkpoint, "--steps", STEPS]


def plain_from(path, scaler: torch.amp.GradScaler | None, count: int = STEPS):
    """The plain loop that loads the checkpoint and takes ``count`` more steps; ``scaler`` None continues the
    saved one."""
    problem = scheduled(42)
    saved = torch.load(path, weights_only=True)
    states = tuple(saved[k] for k in ("model", "optimizer", "scheduler", "scaler"))
    model, optimizer, scheduler, scaler = loaded(
        copy.deepcopy(problem.model), problem.make_optimizer, problem.make_scheduler, states, scaler
    )
    return plain_steps(
        model, optimizer, scheduler, scaler, losses_of(problem, SAVED_AT, count), SAVED_AT, 42, True
    )


def test_a_search_from_a_checkpoint_trains_the_run_as_it_was_beside_the_default(tmp_path, checkpoint):
    args = [*scheduled_from(checkpoint), "--trials", 7]
    proc = run_cli([*args, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == (
        f"search.optimize: from step {SAVED_AT} of torch.save checkpoint {checkpoint}: every run trains steps"
        f" {SAVED_AT} to {SAVED_AT + STEPS - 1}"
    )
    study = optuna.load_study(
        study_name="tasks_for_tests-scheduled", storage=f"sqlite:///{tmp_path / 'study.db'}"
    )
    assert study.user_attrs["checkpoint"] == str(checkpoint)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    by_tag = {t.user_attrs.get("baseline"): t for t in done}
    assert sum(t.user_attrs.get("baseline") == AS_RUN_BASELINE for t in done) == 1
    saved = torch.load(checkpoint, weights_only=True)["scaler"]
    as_run = by_tag[AS_RUN_BASELINE]
    assert as_run.params["init_scale"] == saved["scale"] < SAVING["init_scale"]  # it had backed off
    assert (as_run.params["growth_factor"], as_run.params["growth_interval"]) == (1.7, 3)
    for trial, scaler in ((as_run, None), (by_tag[DEFAULT_BASELINE], torch.amp.GradScaler("cpu"))):
        plain = plain_from(checkpoint, scaler)
        assert trial.user_attrs["scale_curve"] == plain.scales and trial.user_attrs[LR_CURVE] == plain.rates
        assert trial.user_attrs["overflow_steps"] == [i for i, s in enumerate(plain.skipped) if s]
        assert trial.user_attrs["loss_curve"] == pytest.approx(plain.losses, rel=1e-6)
        assert trial.user_attrs[FIRST_STEP] == SAVED_AT
    assert "as-run" in proc.stdout  # the summary shows the run as it was beside the default


def test_the_run_length_and_the_confirmation_go_on_from_the_checkpoint(tmp_path, checkpoint):
    """--run-steps trains the default from the checkpoint as the plain loop does over that many steps, and
    search.confirm rebuilds the study's problem from the checkpoint the study recorded: every run starts at
    its step."""
    args = [*scheduled_from(checkpoint), "--trials", 6]
    proc = run_cli([*args, "--run-steps", 25, "--best-out", "best.json", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    default = json.loads((tmp_path / "best.json").read_text())["run_length"]["default"]
    assert default["skipped"] == sum(plain_from(checkpoint, torch.amp.GradScaler("cpu"), 25).skipped)
    study = "tasks_for_tests-scheduled"
    proc = run_cli(
        ["--study-name", study, "--seeds", 2, "--top", 1, "--no-corners", "--quiet"],
        tmp_path,
        "search.confirm",
    )
    assert proc.returncode == 0, proc.stderr
    seeded = f"(data seeds 43..44: new data each, every run from step {SAVED_AT} of checkpoint {checkpoint})"
    assert seeded in proc.stdout, proc.stdout
    report = build_report(load_snapshot(f"sqlite:///{tmp_path / 'study.db'}", study))
    assert "new data seeds, every run from the study's checkpoint" in report.section("confirmation").intro
    assert report.data["settings"]["first_step"] == SAVED_AT
    runs = optuna.load_study(
        study_name=f"{study}.confirm", storage=f"sqlite:///{tmp_path / 'study.db'}"
    ).trials
    assert runs and all(t.user_attrs[FIRST_STEP] == SAVED_AT and LR_CURVE in t.user_attrs for t in runs)


def test_under_a_framework_s_rule_the_saved_gradscaler_is_not_trained_as_the_run_was(tmp_path, checkpoint):
    args = ["--task", "tasks_for_tests:scheduled", "--checkpoint", checkpoint, "--steps", 4, "--trials", 2]
    proc = run_cli([*args, "--scaler", "deepspeed", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (
        "note: baseline as-run not trained: the checkpoint saved GradScaler's state, and this study follows"
        " DeepSpeed's rule" in proc.stderr
    )
    assert "as-run" not in proc.stdout


def test_under_deepspeeds_rule_the_run_as_it_was_continues_deepspeeds_saved_scaler(tmp_path):
    """A checkpoint whose scaler is DeepSpeed's own (pickled whole, as ZeRO saves it): a DeepSpeed study
    trains it once as ``as-run``, its setting read off the object, step for step as the plain loop that loads
    it; so does a DeepSpeed diagnosis, and a Megatron-LM one says that its scaler starts afresh."""
    path = tmp_path / "zero.pt"
    deepspeed = deepspeed_scaler(23, 3, 2, False, 1)
    moves = DeepSpeedMoves(deepspeed)
    save_rule_run(scheduled(42), path, moves, SAVED_AT)
    args = ["--task", "tasks_for_tests:scheduled", "--checkpoint", path, "--steps", STEPS, "--trials", 4]
    proc = run_cli([*args, "--scaler", "deepspeed", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    power = int(math.log2(deepspeed.cur_scale))
    assert (
        "note: baseline as-run: the run as it was at the checkpoint, its scaler continued from"
        f" initial_scale_power {power}, loss_scale_window 3, hysteresis 2, consecutive_hysteresis 0,"
        " min_loss_scale 1, beside the default started afresh" in proc.stderr
    )
    study = optuna.load_study(
        study_name="tasks_for_tests-scheduled", storage=f"sqlite:///{tmp_path / 'study.db'}"
    )
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    (as_run,) = [t for t in done if t.user_attrs.get("baseline") == AS_RUN_BASELINE]
    assert as_run.params["initial_scale_power"] == power < 23  # it had backed off
    plain = plain_rule_continue(scheduled(42), path, moves, SAVED_AT, STEPS)
    assert as_run.user_attrs["scale_curve"] == plain.scales and as_run.user_attrs[LR_CURVE] == plain.rates
    assert as_run.user_attrs["overflow_steps"] == [i for i, s in enumerate(plain.skipped) if s]
    assert "as-run" in proc.stdout

    args = ["--task", "tasks_for_tests:scheduled", "--checkpoint", path, "--steps", STEPS]
    proc = run_cli([*args, "--scaler", "deepspeed", "--json", "d.json"], tmp_path, module="search.diagnose")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["checkpoint"].endswith(", its scaler continued")
    assert data["runs"]["fp16"]["skipped"] == plain.skipped and any(plain.skipped)
    proc = run_cli([*args, "--scaler", "megatron"], tmp_path, module="search.diagnose")
    assert proc.returncode == 0, proc.stderr
    assert (
        "search.diagnose: note: the checkpoint saved DeepSpeed's scaler state, and these runs follow"
        " Megatron-LM's rule: its scaler starts afresh" in proc.stderr
    )


def test_a_resume_from_another_checkpoint_or_none_is_refused(tmp_path, checkpoint):
    args = ["--task", "tasks_for_tests:scheduled", "--steps", STEPS, "--trials", 5, "--quiet"]
    assert run_cli([*args, "--checkpoint", checkpoint], tmp_path).returncode == 0
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"checkpoint: study has {checkpoint}, this run none" in proc.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file or directory"),
        (b"\x80\x03garbage", "cannot be read"),
        (
            {"model": {}, "step": 3},
            "does not fit the task's model: missing 0.weight, 0.bias, 2.weight and 1 more",
        ),
    ],
)
def test_a_bad_checkpoint_is_one_line_exit_2_and_writes_nothing(tmp_path, content, message):
    path = tmp_path / "ckpt.pt"
    write_content(path, content)
    task = ["--task", "tasks_for_tests:scheduled", "--checkpoint", path]
    for args, module in (
        ([*task, "--trials", 3], "search.optimize"),
        ([*task, "--json", "d.json"], "search.diagnose"),
    ):
        proc = run_cli(args, tmp_path, module)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == (["ckpt.pt"] if content is not None else [])


def test_a_saved_scaler_no_setting_can_write_is_said_and_not_continued(tmp_path, checkpoint):
    """A fairseq scale below 1 (its --fp16-init-scale takes whole numbers): one note, no as-run baseline,
    and the diagnosis trains fairseq's default afresh."""
    saved = torch.load(checkpoint, weights_only=True) | {"scaler": {"loss_scale": 0.5}}
    path = tmp_path / "fairseq.pt"
    torch.save(saved, path)
    args = [*scheduled_from(path), "--scaler", "fairseq"]
    note = (
        "note: the checkpoint's fairseq scaler has scale 2^-1, which fp16_init_scale (a whole number >= 1)"
        " cannot write in fairseq's config; it is not continued: every run starts its scaler afresh"
    )
    proc = run_cli([*args, "--trials", 3, "--quiet"], tmp_path)
    assert proc.returncode == 0 and f"search.optimize: {note}" in proc.stderr, proc.stderr
    assert "as-run" not in proc.stdout
    proc = run_cli([*args, "--json", "d.json"], tmp_path, module="search.diagnose")
    assert proc.returncode == 0 and f"search.diagnose: {note}" in proc.stderr, proc.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    assert not data["checkpoint"].endswith("continued") and data["settings"]["fp16_init_scale"] == 128


def test_population_mode_from_a_checkpoint_is_refused_in_one_line(tmp_path, checkpoint):
    """The stacked optimizer keeps no schedule and starts its state at zero: refused before anything is
    written, not trained from the wrong state."""
    proc = run_cli([*scheduled_from(checkpoint), "--trials", 4, "--population", 4], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot be trained as a population: it continues a checkpoint or schedules its learning rate" in (
        proc.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_a_diagnosis_from_a_checkpoint_continues_its_scaler_unless_a_setting_is_given(tmp_path, checkpoint):
    """No GradScaler flag: the run as it was (the saved scaler continued); a flag: that setting, afresh."""
    args = scheduled_from(checkpoint)
    proc = run_cli([*args, "--json", "d.json"], tmp_path, module="search.diagnose")
    assert proc.returncode == 0, proc.stderr
    continued = "; these settings: its own scaler, continued (a setting's flags diagnose a restart)"
    assert proc.stderr.splitlines()[0].endswith(continued)
    data = json.loads((tmp_path / "d.json").read_text())
    saved = torch.load(checkpoint, weights_only=True)["scaler"]
    assert data["first_step"] == SAVED_AT and data["checkpoint"].endswith(", its scaler continued")
    assert data["settings"]["init_scale"] == saved["scale"]
    plain = plain_from(checkpoint, None)
    fp16 = data["runs"]["fp16"]
    assert fp16["skipped"] == plain.skipped and fp16["losses"] == pytest.approx(plain.losses, rel=1e-6)
    assert [s["step"] for s in data["skips"]] == [SAVED_AT + i for i, s in enumerate(plain.skipped) if s]
    assert f"scale: 2^{math.log2(fp16['scales'][0]):.1f} at step {SAVED_AT}," in proc.stdout

    proc = run_cli([*args, "--init-scale", 65536, "--json", "f.json"], tmp_path, module="search.diagnose")
    fresh = json.loads((tmp_path / "f.json").read_text())
    assert proc.returncode == 0 and not fresh["checkpoint"].endswith("continued")
    assert fresh["runs"]["fp16"]["skipped"] == plain_from(checkpoint, torch.amp.GradScaler("cpu")).skipped


def test_late_mlp_from_its_checkpoint(tmp_path):
    """The task where the trouble comes late (tests/tasks/test_late_mlp.py: healthy from step 0): from the
    checkpoint at step 320, written by the plain loop, the diagnosis says underflow, and the search it starts
    answers with a larger init_scale, the default's row underflowing beside it. A diagnosis of the run from
    another step is refused as the start of this search, and nothing is written."""
    late = write_late_checkpoint(tmp_path / "late-320.pt")
    common = ["--task", "late-mlp", "--steps", 64, "--checkpoint", late]
    proc = run_cli([*common, "--json", "d.json"], tmp_path, module="search.diagnose")
    diagnosis = json.loads((tmp_path / "d.json").read_text())
    assert proc.returncode == 0 and diagnosis["verdict"] == "underflow" and diagnosis["first_step"] == 320
    (tmp_path / "d0.json").write_text(json.dumps(diagnosis | {"first_step": 0}))

    searched = [*common, "--trials", 12, "--quiet", "--best-out", "best.json"]
    refused = run_cli([*searched, "--from-diagnosis", "d0.json"], tmp_path)
    assert refused.returncode == 2 and "it diagnosed the run from step 0 and this run starts at step 320" in (
        refused.stderr
    )
    assert not (tmp_path / "study.db").exists()
    proc = run_cli([*searched, "--from-diagnosis", "d.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["verdict"] == "change" and best["best"]["cpu"]["init_scale"] >= 2.0**18
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert "underflow" in rows["seed-1"] and "underflow" in rows["as-run"]

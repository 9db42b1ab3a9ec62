"""``--population K`` in the command: K sampled trials trained together, each stored as an ordinary trial.

The library (search/population.py) is checked against the ordinary trainer in test_population.py; this
file checks the wiring: --trials semantics, the record, bad input, interrupts, workers, resume, and the
batched writes and heartbeats a population uses in a shared study.
"""

from __future__ import annotations

import pathlib
import shutil
import signal
import time

import optuna
import pytest
import torch
from optuna.trial import TrialState

from search.core import DEFAULTS, PenaltyConfig, scaler_config
from search.core import _record as record
from search.optimize import main
from search.storage import Finish, TrialWriter, open_storage
from search.tasks.seed_mlp import build as build_seed
from search.training import run_steps, run_trial

from conftest import (
    CE_LOSS_REL,
    interrupt_at,
    load,
    polled_trials,
    run_cli,
    run_process,
    start_cli,
    wait_until_stale,
)

BASELINES = ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]
# Where a test checks the wiring (counts, states, reasons, writes) and no trial's numbers: 3 steps, not 30.
SHORT = ["--epochs", "3"]


def _baselines(trials: list[optuna.trial.FrozenTrial]) -> list[str]:
    return sorted(
        t.user_attrs["baseline"]
        for t in trials
        if t.state == TrialState.COMPLETE and "baseline" in t.user_attrs
    )


@pytest.fixture(scope="module")
def population_study(tmp_path_factory) -> pathlib.Path:
    """5 baselines, then 8 sampled trials as two populations of 4 (two, so that "equal within a
    population" and the second population's wiring are seen; K itself is not what these tests check),
    3 steps a trial."""
    directory = tmp_path_factory.mktemp("population")
    proc = run_cli(["--trials", "13", "--population", "4", *SHORT, "--quiet"], directory)
    assert proc.returncode == 0, proc.stderr
    return directory


def test_a_population_run_reaches_exactly_n_with_every_baseline_once(population_study):
    trials = load(population_study).get_trials()
    assert len(trials) == 13 and all(t.state == TrialState.COMPLETE for t in trials)
    assert _baselines(trials) == BASELINES
    sampled = [t for t in trials if "baseline" not in t.user_attrs]
    assert [t.user_attrs[record.POPULATION] for t in sampled] == [4] * 8
    assert not any(record.POPULATION in t.user_attrs for t in trials[:5])  # baselines run as ordinary trials
    # A member's train_seconds is its share of the population's wall time: equal within a population.
    assert len({t.user_attrs[record.TRAIN_SECONDS] for t in sampled[:4]}) == 1
    assert len({t.user_attrs[record.TRAIN_SECONDS] for t in sampled[4:]}) == 1
    assert len({tuple(sorted(t.params.items())) for t in sampled}) == 8  # K asks, K different settings


def test_each_member_stores_what_an_ordinary_trial_of_its_params_stores(population_study):
    """The stored record is the ordinary one: run_trial on each member's params, on its own, agrees."""
    problem = build_seed(DEFAULTS.run.seed)
    sampled = [t for t in load(population_study).get_trials() if "baseline" not in t.user_attrs]
    for t in sampled:
        ordinary = run_trial(
            problem,
            scaler_config(t.params, DEFAULTS.space),
            steps=run_steps(problem, int(SHORT[1]), 0),  # the study's epochs
            amp_dtype=torch.float16,
            penalty=PenaltyConfig(),
            device_label=t.user_attrs[record.DEVICE],
        )
        mine, theirs = dict(t.user_attrs), dict(ordinary.user_attrs)
        assert set(mine) == set(record.RUN_ATTRS) | {record.WORKER, record.POPULATION}
        # seed-mlp's cross-entropy loss values may differ in the last bits (test_population.py's docstring);
        # with last-step evaluation (a full-batch task) the evaluation losses are loss values too.
        assert t.value == pytest.approx(ordinary.value, rel=CE_LOSS_REL), t.number
        for key in ("final_loss", "eval_loss", "eval_median", "initial_eval_loss", "initial_eval_median"):
            assert mine.pop(key) == pytest.approx(theirs.pop(key), rel=CE_LOSS_REL), (t.number, key)
        mine_curve, their_curve = mine.pop(record.LOSS_CURVE), theirs.pop(record.LOSS_CURVE)
        assert [v is None for v in mine_curve] == [v is None for v in their_curve]
        assert [v for v in mine_curve if v is not None] == pytest.approx(
            [v for v in their_curve if v is not None], rel=CE_LOSS_REL
        )
        assert list(t.intermediate_values) == list(ordinary.intermediate_values)
        assert list(t.intermediate_values.values()) == pytest.approx(
            list(ordinary.intermediate_values.values()), rel=CE_LOSS_REL
        )
        for key in (record.TRAIN_SECONDS, record.WORKER, record.POPULATION):
            mine.pop(key)
        theirs.pop(record.TRAIN_SECONDS)
        assert mine == theirs, t.number  # the scale curve, skips, failure code, fp32 loss ...: exactly


@pytest.mark.parametrize(
    "args, message",
    [
        # A user task whose model is not a Sequential of Linear layers and activations (LayerNorm blocks).
        (
            ["--task", "examples.noisy_regression:build"],
            "cannot be trained as a population: model layer 1 is Block",
        ),
        (["--population", "0"], "population must be between 1 and 4096, got 0"),
        (["--population", "5000"], "population must be between 1 and 4096, got 5000"),
    ],
)
def test_bad_population_input_is_one_line_exit_2_and_creates_no_file(
    tmp_path, monkeypatch, capsys, args, message
):
    monkeypatch.chdir(tmp_path)
    argv = args if "--population" in args else args + ["--population", "4"]
    assert main(argv + ["--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_an_unsupported_task_leaves_an_existing_study_untouched(
    population_study, tmp_path, monkeypatch, capsys
):
    shutil.copy(population_study / "study.db", tmp_path / "study.db")
    before = (tmp_path / "study.db").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["--trials", "30", "--population", "4", "--task", "examples.noisy_regression:build"]) == 2
    assert "cannot be trained as a population" in capsys.readouterr().err
    assert (
        sorted(p.name for p in tmp_path.iterdir()) == ["study.db"]
        and (tmp_path / "study.db").read_bytes() == before
    )


def test_ctrl_c_mid_population_fails_all_its_trials_and_leaves_none_running(tmp_path, monkeypatch, capsys):
    import search.study._trial_training

    original = search.study._trial_training.run_population
    interrupt_at(monkeypatch, search.study._trial_training, "run_population", 1, True)
    monkeypatch.chdir(tmp_path)
    assert main(["--trials", "21", "--population", "8", *SHORT, "--quiet"]) == 130
    err = capsys.readouterr().err
    assert (
        "interrupted by SIGINT; trials 5-12 (a population of 8), in flight, were recorded as FAIL" in err
    ), err
    trials = load(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 5 + [TrialState.FAIL] * 8
    assert all(
        t.user_attrs[record.FAIL_REASON] == "interrupted (SIGINT), with the 8 trials of its population"
        for t in trials[5:]
    )
    # Resuming after the interrupt completes the study: the failed trials are replaced, not counted.
    monkeypatch.setattr(search.study._trial_training, "run_population", original)
    assert main(["--trials", "13", "--population", "8", *SHORT, "--quiet"]) == 0
    trials = load(tmp_path).get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 13 and _baselines(trials) == BASELINES


def test_a_failing_population_fails_its_trials_with_the_reason_and_the_study_goes_on(tmp_path, monkeypatch):
    import search.study._trial_training

    original, calls = search.study._trial_training.run_population, []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the device fell over")
        return original(*args, **kwargs)

    monkeypatch.setattr(search.study._trial_training, "run_population", fails_once)
    monkeypatch.chdir(tmp_path)
    assert main(["--trials", "9", "--population", "4", *SHORT, "--quiet"]) == 0
    trials = load(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 5 + [TrialState.FAIL] * 4 + [
        TrialState.COMPLETE
    ] * 4
    assert {t.user_attrs[record.FAIL_REASON] for t in trials[5:9]} == {"RuntimeError: the device fell over"}


def test_the_trial_timeout_applies_to_the_whole_population(tmp_path, monkeypatch, capsys):
    # One trial of 4 slow steps sleeps 0.2 s (the first 0.4 s, with its fp32 reference run) and fits in
    # 1 s; eight together sleep 1.6 s and do not: 0.6 s to spare on both sides, more than ten steps of
    # four against 1.5 s left (0.5 s), with baselines 2.5x shorter.
    args = [
        "--trials",
        "13",
        "--population",
        "8",
        "--task",
        "tasks_for_tests:slow",
        "--epochs",
        "4",
        "--trial-timeout",
        "1.0",
        "--max-failed-trials",
        "8",
        "--quiet",
    ]
    monkeypatch.chdir(tmp_path)
    assert main(args) == 1
    assert "8 trials failed in this run" in capsys.readouterr().err
    trials = load(tmp_path, "tasks_for_tests-slow").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 5 + [TrialState.FAIL] * 8
    reasons = {t.user_attrs[record.FAIL_REASON] for t in trials[5:]}
    assert len(reasons) == 1 and "TrialTimeout" in reasons.pop()


def test_resume_of_a_population_study(population_study, tmp_path, monkeypatch):
    shutil.copy(population_study / "study.db", tmp_path / "study.db")
    monkeypatch.chdir(tmp_path)
    assert (
        main(["--trials", "16", "--population", "4", *SHORT, "--quiet"]) == 0
    )  # the last population: the 3 still needed
    assert (
        main(["--trials", "17", *SHORT, "--quiet"]) == 0
    )  # population is no recorded setting: ordinary trials resume it
    trials = load(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 17 and _baselines(trials) == BASELINES
    assert [t.user_attrs.get(record.POPULATION) for t in trials[5:]] == [4] * 8 + [3] * 3 + [None]


def test_two_workers_with_populations_reach_n_to_n_plus_k(tmp_path):
    # Each worker counts the study, then registers its population: two that count at the same moment
    # both take what is still needed, so W workers end with N to N + (W - 1) * K (measured: 21 of 17 once).
    proc = run_process(["--trials", "17", "--workers", "2", "--population", "4", *SHORT, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = load(tmp_path).get_trials()
    assert not [t for t in trials if t.state != TrialState.COMPLETE]  # nothing RUNNING, nothing lost
    assert 17 <= len(trials) <= 17 + (2 - 1) * 4
    assert _baselines(trials) == BASELINES
    sampled = [t for t in trials if "baseline" not in t.user_attrs]
    assert len({t.system_attrs["search:write_id"] for t in sampled}) == len(sampled)  # each stored once
    assert len({tuple(sorted(t.params.items())) for t in sampled}) == len(sampled)  # no member written twice
    assert all(record.POPULATION in t.user_attrs for t in sampled)


def test_a_shared_population_is_registered_running_and_finished_in_one_transaction_each(
    postgres_url, monkeypatch
):
    """On a database server (shared): K RUNNING with first heartbeats in one write, K finished in one more."""
    import search.study._trial_training
    from search.storage import TrialRecorder

    writes: list[tuple[str, int]] = []
    original_write, original_finish = TrialRecorder.write_many, TrialRecorder.finish_many

    def write_many(self, members, started):
        writes.append(("write", len(members)))
        return original_write(self, members, started)

    def finish_many(self, finishes):
        writes.append(("finish", len(finishes)))
        return original_finish(self, finishes)

    monkeypatch.setattr(TrialRecorder, "write_many", write_many)
    monkeypatch.setattr(TrialRecorder, "finish_many", finish_many)
    seen_running: list[int] = []
    original_run = search.study._trial_training.run_population

    def run_population(*args, **kwargs):
        study = optuna.load_study(storage=postgres_url, study_name="seed-mlp")
        seen_running.append(len(study.get_trials(states=(TrialState.RUNNING,))))
        return original_run(*args, **kwargs)

    monkeypatch.setattr(search.study._trial_training, "run_population", run_population)
    assert main(["--storage", postgres_url, "--trials", "13", "--population", "4", *SHORT, "--quiet"]) == 0
    assert writes == [("write", 4), ("finish", 4)] * 2
    assert seen_running == [4, 4]
    trials = optuna.load_study(storage=postgres_url, study_name="seed-mlp").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 13 and _baselines(trials) == BASELINES


def test_a_dead_workers_population_is_failed_and_retried(postgres_url, tmp_path):
    """kill -9 during a shared population: its K RUNNING trials go stale, are failed and run again."""
    args = [
        "--storage",
        postgres_url,
        "--trials",
        "9",
        "--population",
        "4",
        "--task",
        "tasks_for_tests:slow",
        "--epochs",
        "12",  # The one population sleeps ~2.4 s: a busy machine's slow polls still see it RUNNING.
        "--heartbeat-interval",
        "1",
        "--quiet",
    ]
    proc = start_cli(args, tmp_path)
    deadline = time.time() + 120
    running: list[optuna.trial.FrozenTrial] = []
    while time.time() < deadline and len(running) < 4 and proc.poll() is None:  # seen RUNNING, or it ended
        time.sleep(0.1)
        try:
            polled = polled_trials(postgres_url, "tasks_for_tests-slow", states=(TrialState.RUNNING,))
        except KeyError:
            continue
        running = [t for t in polled if "baseline" not in t.user_attrs]
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert len(running) == 4
    storage = open_storage(postgres_url, heartbeat_interval=1)
    study = optuna.load_study(storage=storage, study_name="tasks_for_tests-slow")
    wait_until_stale(storage, study, [t._trial_id for t in running])  # No heartbeat for twice the interval.
    storage.engine.dispose()
    resumed = run_cli(args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    trials = optuna.load_study(storage=postgres_url, study_name="tasks_for_tests-slow").get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    failed = {t.number for t in trials if t.state == TrialState.FAIL}
    assert {t.number for t in running} <= failed
    retried = [t for t in trials if t.system_attrs.get("failed_trial") in {r.number for r in running}]
    assert len(retried) == 4 and all(t.state == TrialState.COMPLETE for t in retried)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 9 and _baselines(trials) == BASELINES


def test_batched_heartbeats_and_finishes_respect_a_peers_fail(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="s")
    writer = TrialWriter(study)
    running = [optuna.trial.create_trial(state=TrialState.RUNNING) for _ in range(3)]
    ids = writer.add_many(running)
    assert [(t.number, t.state) for t in study.get_trials()] == [(n, TrialState.RUNNING) for n in range(3)]
    wait_until_stale(storage, study, ids)  # all three, registered in one transaction, silent since
    writer.record_heartbeats(ids[:2])  # the third stays silent: stale after 2 intervals
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        optuna.storages.fail_stale_trials(study)
    states = [t.state for t in study.get_trials()]
    assert states == [
        TrialState.RUNNING,
        TrialState.RUNNING,
        TrialState.FAIL,
        TrialState.WAITING,
    ]  # + its retry
    trials = [optuna.Trial(study, i) for i in ids]
    done = writer.finish_many([Finish(t, TrialState.COMPLETE, 0.5, {"k": 1}, {0: 1.0}) for t in trials])
    assert done == [True, True, False]  # the peer's FAIL stands
    stored = study.get_trials()
    assert [t.state for t in stored[:3]] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert (
        stored[0].value == 0.5
        and stored[0].user_attrs == {"k": 1}
        and stored[0].intermediate_values == {0: 1.0}
    )

"""The batched writer must store exactly what ``study.add_trial`` stores, on every database."""

from __future__ import annotations

import datetime

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search.storage import WRITE_ID_ATTR, TrialRecorder, TrialWriter, open_storage

from conftest import FORK, forked_together, wait_until_stale


def _trial(state: TrialState, value: float | None) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        state=state,
        value=value,
        params={"init_scale": 2.0**16, "growth_interval": 37},
        distributions={
            "init_scale": FloatDistribution(2.0**-20, 2.0**32, log=True),
            "growth_interval": IntDistribution(1, 2000, log=True),
        },
        user_attrs={"loss_curve": [0.7, None, 0.4], "failure": "none", "learned": True, "n": 3},
        system_attrs={"sampler:key": {"a": [1, 2]}},
        # A curve longer than one multi-row INSERT holds on PostgreSQL (999 parameters, 5 a row): two.
        intermediate_values=(
            {3: 0.5, 10: float("inf"), **{20 + i: 1 / (i + 1) for i in range(250)}}
            if state != TrialState.FAIL
            else {}
        ),
    )
    t.datetime_start = datetime.datetime(2026, 1, 2, 3, 4, 5)
    return t


def _comparable(t: optuna.trial.FrozenTrial) -> tuple:
    return (
        t.number,
        t.state,
        t.value,
        t.params,
        t.distributions,
        t.user_attrs,
        t.system_attrs,
        t.intermediate_values,
        t.datetime_start,
    )


def _check_same_as_add_trial(url: str) -> None:
    storage = open_storage(url)
    ours = optuna.create_study(storage=storage, study_name="batched")
    theirs = optuna.create_study(storage=storage, study_name="reference")
    writer = TrialWriter(ours)
    assert writer.batched
    for state, value in [
        (TrialState.COMPLETE, 0.42),
        (TrialState.PRUNED, None),
        (TrialState.FAIL, None),
        (TrialState.COMPLETE, float("inf")),
    ]:
        writer.add(_trial(state, value))
        theirs.add_trial(_trial(state, value))
    got = [_comparable(t) for t in optuna.load_study(storage=url, study_name="batched").get_trials()]
    want = [_comparable(t) for t in optuna.load_study(storage=url, study_name="reference").get_trials()]
    assert got == want and [g[0] for g in got] == [0, 1, 2, 3]
    assert ours.best_value == 0.42
    storage.engine.dispose()


def test_sqlite(tmp_path):
    _check_same_as_add_trial(f"sqlite:///{tmp_path / 's.db'}")


def test_postgresql(postgres_url):
    _check_same_as_add_trial(postgres_url)


def test_mariadb(mysql_url):
    _check_same_as_add_trial(mysql_url)


def test_in_memory_falls_back_to_add_trial():
    study = optuna.create_study()
    writer = TrialWriter(study)
    assert not writer.batched
    writer.add(_trial(TrialState.COMPLETE, 1.0))
    assert study.best_value == 1.0 and study.trials[0].user_attrs["n"] == 3


def test_invalid_trial_is_refused_before_writing(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    bad = _trial(TrialState.COMPLETE, 1.0)
    bad.params["init_scale"] = 2.0**40  # outside its distribution
    with pytest.raises(ValueError):
        TrialWriter(study).add(bad)
    assert study.trials == []


def _check_finish_same_as_tell(url: str) -> None:
    storage = open_storage(url)
    for name in ("batched", "reference"):
        study = optuna.create_study(storage=storage, study_name=name)
        study.enqueue_trial({"x": 0.5}, user_attrs={"baseline": "seed-1"})
        study.enqueue_trial({"x": 0.25})
    attrs = {"loss_curve": [0.7, None], "baseline": "seed-1", "failure": "none"}
    ours = optuna.load_study(storage=storage, study_name="batched")
    theirs = optuna.load_study(storage=storage, study_name="reference")
    writer = TrialWriter(ours)
    curve = {0: 0.7, 1: float("inf"), 2: 0.4}
    for state, value in [(TrialState.COMPLETE, 0.3), (TrialState.FAIL, None)]:
        a, b = ours.ask(), theirs.ask()
        a.suggest_float("x", 0, 1)
        b.suggest_float("x", 0, 1)
        a.report(0.7, 0)  # A pruner's report before the finish: written once, not twice.
        writer.finish(a, state, value, attrs, curve)
        for key, attr in attrs.items():
            b.set_user_attr(key, attr)
        for step, loss in curve.items():
            b.report(loss, step)
        theirs.tell(b, value, state=state)
    got = [_comparable(t)[:-1] for t in optuna.load_study(storage=url, study_name="batched").get_trials()]
    want = [_comparable(t)[:-1] for t in optuna.load_study(storage=url, study_name="reference").get_trials()]
    assert got == want and got[0][1] == TrialState.COMPLETE and got[1][1] == TrialState.FAIL
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        writer.finish(optuna.Trial(ours, ours.trials[0]._trial_id), TrialState.COMPLETE, 1.0, {})
    storage.engine.dispose()


def test_finish_sqlite(tmp_path):
    _check_finish_same_as_tell(f"sqlite:///{tmp_path / 's.db'}")


def test_finish_postgresql(postgres_url):
    _check_finish_same_as_tell(postgres_url)


def test_finish_mariadb(mysql_url):
    _check_finish_same_as_tell(mysql_url)


def _check_finish_from_the_written_record(url: str) -> None:
    """A trial the recorder registered RUNNING is finished from its own record of the write, not read back:
    storage ends with what finishing the trial read back stores."""
    storage = open_storage(url)
    stored = []
    for name, read_back in (("record", False), ("read", True)):
        study = optuna.create_study(storage=storage, study_name=name)
        recorder = TrialRecorder(study, retry_budget=0)
        template = _trial(TrialState.COMPLETE, 0.5)
        started = datetime.datetime(2026, 1, 2, 3, 4, 5)
        trial_id = recorder.write(template, TrialState.RUNNING, None, {}, {}, started)
        record = recorder.last_written
        assert record is not None and record.state == TrialState.RUNNING and record._trial_id == trial_id
        trial = optuna.Trial(study, trial_id) if read_back else record
        curve = template.intermediate_values
        assert recorder.finish(trial, TrialState.COMPLETE, 0.5, template.user_attrs, curve)
        (t,) = optuna.load_study(storage=storage, study_name=name).get_trials()
        sampler_attrs = {k: v for k, v in t.system_attrs.items() if k != WRITE_ID_ATTR}
        stored.append((*_comparable(t)[:6], sampler_attrs, *_comparable(t)[7:]))
    assert stored[0] == stored[1] and stored[0][1] == TrialState.COMPLETE
    storage.engine.dispose()


def test_finish_from_the_written_record_sqlite(tmp_path):
    _check_finish_from_the_written_record(f"sqlite:///{tmp_path / 's.db'}")


def test_finish_from_the_written_record_postgresql(postgres_url):
    _check_finish_from_the_written_record(postgres_url)


def _enqueue_the_baselines(url: str, go, counts, index: int) -> None:
    """One process: its own storage and connections; enqueues seed-1..seed-5 once the others are ready too."""
    from search.core import waiting_baseline

    writer = TrialWriter(optuna.load_study(storage=open_storage(url), study_name="q"))
    go.wait()
    counts[index] = len(
        writer.enqueue_once([waiting_baseline(f"seed-{i}", {"x": i}) for i in range(1, 6)], "baseline")
    )


def _check_enqueue_once_from_many_processes(url: str) -> None:
    """Four processes enqueue the same tags at once: each tag ends up once.

    Forked from this one (a fresh interpreter per process only added seconds of imports): four real
    processes with their own connections, held at a barrier so that they enqueue at the same moment.
    """
    storage = open_storage(url)
    optuna.create_study(storage=storage, study_name="q")
    storage.engine.dispose()
    go, counts = FORK.Barrier(4, timeout=60), FORK.Array("i", [-1] * 4)
    assert forked_together(_enqueue_the_baselines, [(url, go, counts, i) for i in range(4)]) == [0] * 4
    assert sorted(counts) == [0, 0, 0, 5]
    trials = optuna.load_study(storage=url, study_name="q").get_trials()
    assert sorted(t.user_attrs["baseline"] for t in trials) == [f"seed-{i}" for i in range(1, 6)]
    assert all(t.state == TrialState.WAITING for t in trials)


def test_enqueue_once_sqlite(tmp_path):
    _check_enqueue_once_from_many_processes(f"sqlite:///{tmp_path / 's.db'}")


def test_enqueue_once_postgresql(postgres_url):
    _check_enqueue_once_from_many_processes(postgres_url)


def test_enqueue_once_mariadb(mysql_url):
    _check_enqueue_once_from_many_processes(mysql_url)


@pytest.mark.parametrize("fixture", ["tmp_path", "postgres_url"])
def test_claimed_and_registered_trials_beat_in_the_same_transaction(request, fixture):
    """A RUNNING trial that never beat is never found stale (Optuna skips it): so a claim, and a sampled
    trial registered RUNNING, carry their first heartbeat in the transaction that makes them RUNNING.
    Nothing beats afterwards here, as when the worker died or gave up on an outage at once."""
    value = request.getfixturevalue(fixture)
    url = f"sqlite:///{value / 's.db'}" if fixture == "tmp_path" else value
    storage = open_storage(url, heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="beats")
    study.enqueue_trial({"x": 1.0})
    writer = TrialWriter(study)
    claimed = writer.claim()
    registered = writer.add(_trial(TrialState.RUNNING, None))
    assert writer.claim() is None  # Nothing else is waiting.
    states = {t._trial_id: t.state for t in study.get_trials()}
    assert states == {claimed: TrialState.RUNNING, registered: TrialState.RUNNING}
    wait_until_stale(storage, study, [claimed, registered])  # only a trial that beat can go stale
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        optuna.storages.fail_stale_trials(study)
    states = {t._trial_id: t.state for t in study.get_trials()}
    assert states[claimed] == states[registered] == TrialState.FAIL
    storage.engine.dispose()


@pytest.mark.parametrize("fixture", ["tmp_path", "postgres_url"])
def test_a_requeued_baseline_is_claimed_in_its_place_in_the_seed_table(request, fixture):
    """seed-1's retry, queued after seed-2..seed-5 and after another queued trial, is claimed first;
    the other baselines follow in the table's order, then the rest by trial id."""
    from search.core import BASELINE, waiting_baseline

    value = request.getfixturevalue(fixture)
    url = f"sqlite:///{value / 's.db'}" if fixture == "tmp_path" else value
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="order")
    writer = TrialWriter(study)
    for tag in ("seed-3", "seed-2", "seed-5", "seed-4"):
        writer.enqueue_once([waiting_baseline(tag, {"x": 1.0})], BASELINE)
    study.enqueue_trial({"x": 2.0})  # e.g. a sampled trial Optuna queued again, no baseline tag
    writer.enqueue_once([waiting_baseline("seed-1", {"x": 1.0})], BASELINE)  # the retry, queued last
    by_id = {t._trial_id: t for t in study.get_trials()}
    order = []
    while (claimed := writer.claim(first=BASELINE)) is not None:
        order.append(by_id[claimed].user_attrs.get(BASELINE, f"#{by_id[claimed].number}"))
    assert order == ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5", "#4"]
    storage.engine.dispose()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_beating_trials_counts_running_trials_that_beat_only(tmp_path):
    """A worker at N waits for these (they finish, or go stale and are retried); a RUNNING trial that
    never beat can never go stale, so waiting for it would never end: not counted."""
    from search.storage import beating_trials

    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="beats")
    silent = study.ask()  # RUNNING, no heartbeat row.
    assert beating_trials(study) == 0
    storage.record_heartbeat(silent._trial_id)
    assert beating_trials(study) == 1
    other = optuna.create_study(storage=storage, study_name="other")  # Another study's beats are not ours.
    storage.record_heartbeat(other.ask()._trial_id)
    assert beating_trials(study) == 1
    study.tell(silent, 1.0)
    assert beating_trials(study) == 0
    no_beats = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'n.db'}"))
    no_beats.ask()
    assert beating_trials(no_beats) == 0  # Heartbeats off: nothing could ever go stale.
    storage.engine.dispose()


def test_a_trial_that_just_beat_beats_again_one_interval_later_not_at_once(tmp_path, monkeypatch):
    """The claim or registration records a trial's first heartbeat: the heartbeat thread's first beat is one
    interval after it (a trial shorter than the interval costs none), then one each interval."""
    import time

    from search.storage import heartbeat

    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="beats")
    beats: list[float] = []
    record = storage.record_heartbeat
    monkeypatch.setattr(storage, "record_heartbeat", lambda i: beats.append(time.monotonic()) or record(i))
    beaten = time.monotonic()
    trial_id = TrialWriter(study).add(_trial(TrialState.RUNNING, None))
    with heartbeat(study, trial_id, beaten):
        time.sleep(0.3)
    assert beats == []
    with heartbeat(study, trial_id, beaten):  # Now 0.3 s after the write: the first beat 0.7 s in.
        time.sleep(1.2)
    assert len(beats) == 1 and beats[0] - beaten >= 0.95  # The next is due 2 s after the write.
    with heartbeat(study, trial_id):  # No write to go by: at once.
        time.sleep(0.1)
    assert len(beats) == 2
    storage.engine.dispose()


@pytest.mark.parametrize("where", ["sqlite", "memory"])
def test_the_trials_holding_a_baseline_are_found_without_reading_the_study(where, tmp_path):
    """A claimed baseline checks that no other trial holds it, finished or RUNNING: one query, the same
    numbers as reading the study gives."""
    url = f"sqlite:///{tmp_path / 's.db'}" if where == "sqlite" else None
    storage = open_storage(url) if url else optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="holders")
    for state, tag in [
        (TrialState.COMPLETE, "seed-1"),
        (TrialState.FAIL, "seed-1"),
        (TrialState.RUNNING, "seed-1"),
        (TrialState.COMPLETE, "seed-2"),
        (TrialState.PRUNED, "seed-1"),
        (TrialState.COMPLETE, None),
    ]:
        trial = optuna.trial.create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None)
        if tag is not None:
            trial.set_user_attr("baseline", tag)
        study.add_trial(trial)
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    assert TrialWriter(study).numbers_with_user_attr("baseline", "seed-1", states) == [0, 2, 4]
    assert TrialWriter(study).numbers_with_user_attr("baseline", "seed-3", states) == []


def test_study_user_attrs_set_at_once_are_what_set_user_attr_stores(tmp_path):
    """A new study's recorded settings are one transaction; a key set again is replaced, as Optuna's."""
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    ours = optuna.create_study(storage=storage, study_name="ours")
    theirs = optuna.create_study(storage=storage, study_name="theirs")
    for attrs in ({"task": "seed-mlp", "space": {"init_scale": [1, 2]}, "n": 3}, {"n": 4, "seed": None}):
        TrialWriter(ours).set_study_user_attrs(attrs)
        for key, value in attrs.items():
            theirs.set_user_attr(key, value)
    reloaded = optuna.load_study(storage=storage, study_name="ours").user_attrs
    assert reloaded == optuna.load_study(storage=storage, study_name="theirs").user_attrs
    assert reloaded["n"] == 4
    storage.engine.dispose()

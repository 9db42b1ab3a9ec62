"""The trial loop's view of the study: what it skips reading must equal what a read returns."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy
import torch
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from search.core import DEFAULTS, with_run
from search.storage import WRITE_ID_ATTR, enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.study import _replica as replica_module
from search.study import _trial_loop as trial_loop_module
from search.tasks.seed_mlp import build


def _runner(tmp_path, trials: int) -> Runner:
    settings = with_run(DEFAULTS, trials=trials, storage=f"sqlite:///{tmp_path}/study.db", epochs=5)
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    return Runner(handle.study, settings, problem, "cpu", torch.float16, sampler, None, steps=5)


def _as_read(t: optuna.trial.FrozenTrial) -> tuple:
    return (
        t._trial_id,
        t.number,
        t.state,
        t.values,
        t.params,
        t.distributions,
        t.user_attrs,
        t.system_attrs,
        t.intermediate_values,
        t.datetime_start,
        t.datetime_complete,
    )


def test_the_study_it_does_not_read_back_equals_what_a_read_returns(tmp_path, monkeypatch):
    """After its own write the loop does not read its trial back (4-5 ms a trial); every such view of the
    study must be exactly what reading the storage gives, the one the summary is made from included."""
    runner = _runner(tmp_path, 14)
    views: list[tuple[list[optuna.trial.FrozenTrial], int]] = []
    original = Runner._study_after_own_write

    def spy(self, before, finished, ended):
        known = original(self, before, finished, ended)
        if known is not None:
            views.append((list(known[0]), known[1]))  # A copy: the loop's list grows in place.
        return known

    monkeypatch.setattr(Runner, "_study_after_own_write", spy)
    runner.run()
    stored = {
        t.number: t
        for t in optuna.load_study(
            storage=runner.study._storage._backend, study_name=runner.study.study_name
        ).get_trials()
    }
    assert len(views) >= 8, "every sampled trial after the baselines should be known without a read"
    for view, finished in views:
        assert [t.number for t in view] == list(range(len(view)))
        assert [_as_read(t) for t in view] == [_as_read(stored[t.number]) for t in view]
        assert finished == sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in view)
    assert runner.stats.stop_reason.startswith("trials reached") and runner.proven_study is not None
    assert [_as_read(t) for t in runner.proven_study] == [_as_read(stored[n]) for n in sorted(stored)]


def test_a_trial_another_process_wrote_before_ours_is_read(tmp_path, monkeypatch):
    """Another writer's trial, stored between the loop's read and its write: the write's number
    shows it, so the loop reads, and the sampler sees that trial."""
    runner = _runner(tmp_path, 9)
    other = optuna.load_study(storage=f"sqlite:///{tmp_path}/study.db", study_name=runner.study.study_name)
    write = runner.recorder.write
    calls: list[int] = []

    def write_after_another(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # The second sampled trial: another process's trial goes first.
            other.add_trial(
                optuna.trial.create_trial(
                    params={"foreign": 0.5}, distributions={"foreign": FloatDistribution(0, 1)}, value=9.0
                )
            )
        return write(*args, **kwargs)

    known: list[object] = []
    original = Runner._study_after_own_write
    monkeypatch.setattr(runner.recorder, "write", write_after_another)
    monkeypatch.setattr(
        Runner,
        "_study_after_own_write",
        lambda self, *args: known.append(original(self, *args)) or known[-1],
    )
    runner.run()
    assert known[0] is not None and known[1] is None and known[2] is not None
    assert any(
        t.params.get("foreign") == 0.5 for t in runner.replica.study.get_trials(states=(TrialState.COMPLETE,))
    )


def test_the_replica_holds_each_stored_trial_once_as_stored(tmp_path):
    """The sampler's in-memory study holds the stored study's trials once each, in order, with what a
    sampler or a pruner reads of them (state, value, params, distributions, reports, system attrs), as
    a plain Optuna study loaded from the same file holds them: the replica's own copy of a sampled
    trial stands for the stored one, rather than a FAIL copy beside it."""
    settings = with_run(DEFAULTS, trials=14, storage=f"sqlite:///{tmp_path}/study.db", epochs=6)
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    sampler, pruner = make_sampler("tpe", 0), optuna.pruners.MedianPruner(n_startup_trials=2)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, pruner)
    runner = Runner(handle.study, settings, problem, "cpu", torch.float16, sampler, pruner, steps=6)
    runner.run()
    runner.replica.sync(handle.study.get_trials(deepcopy=False))  # The last trial, as the next loop would.
    stored = optuna.load_study(storage=f"sqlite:///{tmp_path}/study.db", study_name="seed-mlp").get_trials()
    held = runner.replica.study.get_trials()

    def read(t: optuna.trial.FrozenTrial) -> tuple:
        """What samplers and pruners read: a PRUNED trial's value is its last report to them (the copy is told
        PRUNED as plain Optuna tells it, with that report as its value); the write id is the recorder's."""
        value = t.values if t.state == TrialState.COMPLETE else None
        sampler_attrs = {k: v for k, v in t.system_attrs.items() if k != WRITE_ID_ATTR}
        return (t.state, value, t.params, t.distributions, t.intermediate_values, sampler_attrs)

    assert len(held) == len(stored) == 14
    assert {t.state for t in stored} >= {TrialState.COMPLETE, TrialState.PRUNED}
    assert any("tpe:" in key for t in stored for key in t.system_attrs)
    assert [read(t) for t in held] == [read(t) for t in stored]


def test_a_sampled_trial_reads_no_whole_study(tmp_path, monkeypatch):
    """Alone on its study, the loop reads the stored study around the queued baselines (another process
    could claim them) and then not again: 12 trials and 30 read it as often, and the replica's sync looks
    at each stored trial once, not at every trial again for each new one."""

    def reads_and_looks(trials: int) -> tuple[int, int]:
        runner = _runner(tmp_path / str(trials), trials)
        reads: list[int] = []
        get_trials = optuna.Study.get_trials

        def counted(self, *args, **kwargs):
            reads.append(self is runner.study)
            return get_trials(self, *args, **kwargs)

        looked_at: list[int] = []
        trial_id_of = replica_module.trial_id_of

        def looked(trial: optuna.trial.FrozenTrial) -> int:
            looked_at.append(trial.number)
            return trial_id_of(trial)

        with monkeypatch.context() as patch:
            patch.setattr(optuna.Study, "get_trials", counted)
            patch.setattr(replica_module, "trial_id_of", looked)
            runner.run()
        return sum(reads), len(looked_at)

    (tmp_path / "12").mkdir(), (tmp_path / "30").mkdir()
    (reads_12, looks_12), (reads_30, looks_30) = reads_and_looks(12), reads_and_looks(30)
    assert reads_12 == reads_30 and reads_30 <= 13, (reads_12, reads_30)
    assert looks_30 - looks_12 <= 2 * (30 - 12), (looks_12, looks_30)  # Each new trial: its id, once added.


def _shared_runner(url: str, trials: int) -> Runner:
    """A worker of a shared study (``--workers``, or a database server), storage opened as a run opens it."""
    settings = with_run(DEFAULTS, trials=trials, storage=url, epochs=3)
    problem = build(settings.run.seed)
    storage = open_storage(url, settings.run.heartbeat_interval)
    if url.startswith("sqlite"):
        enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    return Runner(handle.study, settings, problem, "cpu", torch.float16, sampler, None, shared=True, steps=3)


# What one sampled trial of a shared study needs, in statements, per transaction (see the test below).
READ_STUDY = 7  # The study row, then the new or unfinished trials and their 5 tables (Optuna's read).
REGISTER = 6  # The study's lock, its count (the number), the trial, its params, system attrs, heartbeat.
FINISH = 5  # The trial's row, locked; its user attrs, value, curve; its state.


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_shared_sampled_trial_costs_the_statements_it_needs(database, tmp_path, request, monkeypatch):
    """A sampled trial of a shared study (many workers on one database) is 3 transactions: the
    read of the study before it (the sampler must see the peers' trials, and the loop whether one is
    queued again or the study is done), its registration (RUNNING, with its params and first heartbeat,
    so that a live peer re-runs it if this worker dies) and its finish. Nothing more: the trial is not read
    back after it is registered (the writer's record stands for it), the heartbeat thread does not beat
    again at once (the registration beat) and, for a trial shorter than the interval, not at all, a
    table's rows are one INSERT on PostgreSQL (psycopg sends an executemany as a statement per row:
    counted so here; SQLite's executemany is one call into the library, no round trip), a trial is numbered
    before its insert, not updated after it, and a fresh trial's finish deletes nothing. On SQLite each
    transaction also sends its BEGIN IMMEDIATE (PostgreSQL's BEGIN and every COMMIT are no cursor
    statements)."""
    sqlite = f"sqlite:///{tmp_path}/study.db"
    url = sqlite if database == "sqlite" else request.getfixturevalue("postgres_url")
    runner = _shared_runner(url, trials=10)  # The 5 baselines, then 5 sampled trials.
    engine = runner.study._storage._backend.engine
    statements: list[int] = []
    transactions: list[int] = []

    def executed(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(len(parameters) if executemany and database == "postgresql" else 1)

    sqlalchemy.event.listen(engine, "before_cursor_execute", executed)
    sqlalchemy.event.listen(engine, "commit", lambda conn: transactions.append(1))
    sqlalchemy.event.listen(engine, "rollback", lambda conn: transactions.append(1))
    marks: list[tuple[int, int]] = []
    sampled = trial_loop_module.run_sampled_trial

    def marked(*args) -> None:  # One loop of a sampled trial: from the study's read to the next read.
        marks.append((sum(statements), len(transactions)))
        sampled(*args)

    monkeypatch.setattr(trial_loop_module, "run_sampled_trial", marked)
    monkeypatch.setattr(runner, "_fail_stale_trials", lambda: None)  # Once a heartbeat interval (60 s).
    try:
        runner.run()
        marks.append((sum(statements), len(transactions)))  # The read that finds the study done.
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", executed)
    begin = 1 if database == "sqlite" else 0
    per_loop = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks[:-1], marks[1:])]
    assert len(per_loop) == 5, marks  # Each sampled trial, with the read after it.
    needed = READ_STUDY + REGISTER + FINISH + 3 * begin
    assert all(count <= needed and xacts <= 3 for count, xacts in per_loop), (per_loop, needed)
    trials = runner.study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 10
    assert all(t.user_attrs and t.intermediate_values and t.params for t in trials[5:])


def test_of_two_claimed_copies_of_one_baseline_the_older_runs_and_a_finished_one_wins(tmp_path):
    """A retry queued by Optuna's stale-trial callback can race with a resume that queues the same failed
    baseline again: two WAITING copies, claimed by two workers at once. The later one gives way to the
    older; neither fails the other, so the baseline still ends up finished once. A finished copy wins over
    both."""
    from search.study import _queued as queued_module

    runner = _runner(tmp_path, 7)
    study = runner.study
    seed_1 = next(t for t in study.get_trials() if t.user_attrs.get("baseline") == "seed-1")
    study.enqueue_trial(seed_1.params, user_attrs={"baseline": "seed-1"})
    writer = runner.recorder.writer
    while writer.claim(first="baseline") is not None:
        pass
    copies = [t for t in study.get_trials() if t.user_attrs.get("baseline") == "seed-1"]
    assert [t.state for t in copies] == [TrialState.RUNNING] * 2
    older, later = (optuna.Trial(study, t._trial_id) for t in copies)
    assert queued_module._duplicate_of(runner, older) is None
    assert queued_module._duplicate_of(runner, later) == (
        f"duplicate of baseline seed-1 (trial {older.number}); not run"
    )
    study.tell(older, 0.5)
    assert queued_module._duplicate_of(runner, later) == (
        f"duplicate of baseline seed-1 (trial {older.number}); not run"
    )

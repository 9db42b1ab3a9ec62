"""Chaos: real faults against a PostgreSQL server of the test's own (``own_postgres``), which may be
stopped at will (the machine's shared servers must never be).

Each case ends with the same checks (:func:`assert_sound`): N finished trials reached, every seed
baseline exactly once among the finished trials, nothing RUNNING, no trial lost (numbers contiguous,
everything finished before the fault still finished) and none stored twice (no write id twice, no
sampled point twice). The default task (seed-mlp), small N; run alone with
``python -m pytest -m chaos``.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import time
from collections.abc import Callable

import optuna
import pytest
import sqlalchemy
from optuna.storages._rdb import models
from optuna.trial import FrozenTrial, TrialState

from search.core import BASELINE, FINISHED, SEED_BASELINES
from search.storage import WRITE_ID_ATTR

from conftest import OwnPostgres, child_pids, fork_server_of, polled_trials, run_cli, run_process, start_cli

pytestmark = pytest.mark.chaos

NAME = "seed-mlp"
SLOW = "tasks_for_tests:slow"  # 50 ms a step, mostly asleep.
SLOW_STUDY = "tasks_for_tests-slow"  # Its default study name.
FAST = ["--quiet"]
TAGS = sorted(tag for tag, _params in SEED_BASELINES)


def trials_of(url: str, name: str = NAME) -> list[FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(storage=storage, study_name=name).get_trials()
    finally:
        storage.engine.dispose()


def completed(url: str, name: str = NAME) -> set[int]:
    return {t.number for t in polled_trials(url, name, states=(TrialState.COMPLETE,))}


def wait_until(condition: Callable[[], bool], timeout: float = 120, what: str = "") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if condition():
                return
        except (KeyError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
            pass  # No study yet.
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def assert_sound(trials: list[FrozenTrial], n: int, most: int, kept: set[int] = frozenset()) -> None:
    """N reached (at most ``most``), baselines once, nothing RUNNING, nothing lost or stored twice."""
    states = collections.Counter(t.state.name for t in trials)
    finished = [t for t in trials if t.state in FINISHED]
    assert n <= len(finished) <= most, states
    assert not [t for t in trials if t.state == TrialState.RUNNING], states
    assert sorted(t.user_attrs[BASELINE] for t in finished if BASELINE in t.user_attrs) == TAGS
    assert [t.number for t in trials] == list(range(len(trials))), "a trial number is missing"
    assert kept <= {t.number for t in finished}, "a trial finished before the fault is no longer finished"
    # Optuna's retry of a stale trial copies its system attrs, write id included: not a second write.
    writes = [t for t in trials if WRITE_ID_ATTR in t.system_attrs and "failed_trial" not in t.system_attrs]
    write_ids = [t.system_attrs[WRITE_ID_ATTR] for t in writes]
    assert len(write_ids) == len(set(write_ids)), "a write was stored twice"
    sampled = [tuple(sorted(t.params.items())) for t in finished if BASELINE not in t.user_attrs]
    assert len(sampled) == len(set(sampled)), "a sampled trial was stored twice"


def worker_pids(parent: int) -> list[int]:
    """The --workers processes of ``parent``: the children of its fork server (search.study._workers)."""
    return child_pids(fork_server_of(parent))


def silent_running_sampled(url: str, seconds: float) -> int:  # Of the slow task's study.
    """RUNNING sampled trials whose last heartbeat is older than ``seconds`` by the database's clock."""
    engine = sqlalchemy.create_engine(url)
    try:
        with sqlalchemy.orm.Session(engine) as session:
            beat = models.TrialHeartbeatModel
            now = session.query(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
            ages = {
                tid: (now - when).total_seconds()
                for tid, when in session.query(beat.trial_id, beat.heartbeat)
            }
    finally:
        engine.dispose()
    return sum(
        t.state == TrialState.RUNNING and BASELINE not in t.user_attrs and ages.get(t._trial_id, 0) > seconds
        for t in trials_of(url, SLOW_STUDY)
    )


def test_hard_restart_mid_run_under_two_workers(own_postgres: OwnPostgres, tmp_path):
    """``pg_ctl stop -m immediate`` (every session cut, no checkpoint), 3 s down, then start: ridden out,
    with one warning for the parent and both workers, the password masked, both workers training."""
    # The slow task (1.5 s a trial, mostly asleep): the outage surely falls mid-run (each worker finishes a
    # trial while the server is down), at little CPU. With seed-mlp's 0.1-s trials, the run could finish
    # between the poll that saw 6 trials and the stop, under a full suite's load (it did once).
    url, n = own_postgres.url.replace("postgres@", "postgres:hunter2@"), 12  # Trust: any password works.
    proc = start_cli(
        ["--trials", str(n), "--task", SLOW, "--workers", "2", "--storage", url, *FAST], tmp_path
    )
    try:
        wait_until(
            lambda: len(completed(url, SLOW_STUDY)) >= len(TAGS) + 1, what="6 trials before the restart"
        )
        kept = completed(url, SLOW_STUDY)
        assert proc.poll() is None, "the run ended before the restart"
        own_postgres.stop("immediate")
        time.sleep(3)
        own_postgres.start()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "storage unreachable" in err, "the restart should have been noticed and ridden out"
    # Three processes met it; the warning is shared (a worker that is back says nothing new).
    assert err.count("storage unreachable while") <= 2, err
    assert "Traceback" not in err and "error" not in err and "hunter2" not in out + err
    assert "2 workers on cpu" in out
    trials = trials_of(url, SLOW_STUDY)
    assert_sound(trials, n, n + 1, kept)
    # Both workers trained (each trial records its process), on one device, and nothing was written here.
    assert len({t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs}) == 2
    assert len({t.user_attrs["device"] for t in trials if "device" in t.user_attrs}) == 1
    assert not (tmp_path / "study.db").exists()


def test_outage_past_storage_retry_gives_up_in_one_line_then_resumes(own_postgres: OwnPostgres, tmp_path):
    """Down longer than --storage-retry: exit 1 with one line, once (two workers and the parent), then
    the command it prints resumes the study once the server is back."""
    url, n = own_postgres.url.replace("postgres@", "postgres:hunter2@"), 12  # Trust: any password works.
    args = ["--trials", str(n), "--task", SLOW, "--workers", "2", "--storage", url, "--storage-retry", "2"]
    proc = start_cli([*args, "--heartbeat-interval", "1", *FAST], tmp_path)
    try:
        wait_until(
            lambda: len(completed(url, SLOW_STUDY)) >= len(TAGS) + 1, what="6 trials before the outage"
        )
        kept = completed(url, SLOW_STUDY)
        assert proc.poll() is None, "the run ended before the outage"
        own_postgres.stop("immediate")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1, err
    assert "stayed unreachable for 2 s (--storage-retry)" in errors[0] and "to resume, run: " in errors[0]
    assert "hunter2" not in out + err and "Traceback" not in err and "commit" not in err
    # Before it gave up: one "retrying" warning for the parent and both workers, not one each.
    assert err.count("storage unreachable while") == 1, err

    own_postgres.start()
    time.sleep(2.5)  # The given-up workers' claimed trials are now stale (2 x the heartbeat interval).
    printed = errors[0].split("to resume, run: ", 1)[1]
    assert printed.endswith(" (with your password in place of ***)")  # the URL had one: the line says so
    command = shlex.split(printed.removesuffix(" (with your password in place of ***)"))
    assert command[:3] == ["python", "-m", "search.optimize"]
    resume = run_process(command[3:], tmp_path, module=command[2])  # python -m MODULE ARGS, as printed
    assert resume.returncode == 0, resume.stderr
    # A re-queued baseline runs past N: up to 5 more than the workers' usual one.
    assert_sound(trials_of(url, SLOW_STUDY), n, n + 1 + len(TAGS), kept)


def test_kill_9_of_a_worker_mid_sampled_trial_then_resume(own_postgres: OwnPostgres, tmp_path):
    """The live worker fails the dead one's trial (no heartbeat for 2 s) and re-runs its params; a resume
    to more trials then goes on from a sound study."""
    # The survivor can reach N before the dead worker's trial goes stale: it must wait for it and run
    # its retry, not stop and leave it RUNNING (it did before). Nine sampled trials leave room to retry
    # the freeze when the victim was between trials.
    url, n = own_postgres.url, 14
    # The slow task (1.5 s a trial, mostly asleep in its loss): a worker frozen at any moment is mostly
    # mid-training, at little CPU.
    args = ["--workers", "2", "--storage", url, "--heartbeat-interval", "1", "--task", SLOW, *FAST]
    proc = start_cli(["--trials", str(n), *args], tmp_path)
    try:
        wait_until(lambda: len(completed(url, SLOW_STUDY)) >= len(TAGS), what="the baselines")
        signal_time = time.time()
        for _attempt in range(20):
            # Frozen first, at any moment: a worker spends most of its time training, so it is mostly
            # frozen mid-trial; then its trial's heartbeat goes silent, and only then is it killed. (Polling
            # for both workers mid-trial and killing at once missed under a full suite's load: the victim
            # had finished its trial in between, or the poll never caught both at once.)
            victim = worker_pids(proc.pid)[0]
            os.kill(victim, signal.SIGSTOP)
            signal_time = time.time()
            time.sleep(1.6)
            if silent_running_sampled(url, seconds=1.4):
                os.kill(victim, signal.SIGKILL)
                break
            os.kill(victim, signal.SIGCONT)  # It was between trials: let it go on, and try again.
            time.sleep(0.3)
        else:
            raise AssertionError("never froze a worker mid sampled trial in 20 tries")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "died (SIGKILL); the others finished the study" in err and "Traceback" not in err
    trials = trials_of(url, SLOW_STUDY)
    assert_sound(
        trials, n, n + 1 + sum(t.state == TrialState.FAIL for t in trials)
    )  # Retries may run past N.
    # The victim's trial failed, and every failed trial was run again with its params. (Under heavy
    # load a live trial's 1-s heartbeat can lag 2 s: a peer fails it too, and it is retried the same way.)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert any(t.datetime_start.timestamp() < signal_time for t in failed), failed
    for t in failed:
        (retry,) = [r for r in trials if r.system_attrs.get("failed_trial") == t.number]
        assert (
            BASELINE not in t.user_attrs and retry.state == TrialState.COMPLETE and retry.params == t.params
        )
    # The headline counts them as the storage does, apart from the trials that failed themselves.
    plural = "trial" if len(failed) == 1 else "trials"
    assert (
        f"0 failed, {len(failed)} {plural} of a stopped worker failed and queued again in"
        in out.splitlines()[0]
    ), out

    # The resume goes on from the study the fault left: in this process, one worker (the workers' own paths
    # ran above).
    assert args[:2] == ["--workers", "2"]
    resume = run_cli(["--trials", str(n + 3), *args[2:]], tmp_path)
    assert resume.returncode == 0, resume.stderr
    assert_sound(trials_of(url, SLOW_STUDY), n + 3, n + 4, {t.number for t in trials if t.state in FINISHED})

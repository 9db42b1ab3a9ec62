"""Several workers on one study: --workers on one host, and separate processes as separate hosts.

Real processes on real SQLite files, PostgreSQL and MariaDB databases (throwaway ones).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import signal
import time

import optuna
import pytest
from optuna.trial import TrialState

from search.core import OVERFLOW_STEPS, record_interrupts, setting_of
from search.scalers import RULES
from search.storage import open_storage, settings_of
from search.study import (
    DevicePlanError,
    plan_workers,
    run_pool,
    sampler_seed,
    threads_per_process,
)

from conftest import child_pids, fork_server_of, polled_trials, run_cli, run_process, start_cli
from tasks_for_tests import MID_TRIAL_FLAG, listening_worker

SLOW = "tasks_for_tests:slow"
SLOW_STUDY = "tasks_for_tests-slow"  # Its default study name (search.core._settings.default_study_name).
TAGS = ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]


def trials_of(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    # As the service opens it: a reader that polls while the hosts create the schema must not race them.
    storage = open_storage(url)
    try:
        return optuna.load_study(storage=storage, study_name=name).get_trials()
    finally:
        storage.engine.dispose()


def assert_study_is_sound(
    trials: list[optuna.trial.FrozenTrial], n: int, workers: int, tags: list[str] = TAGS
) -> None:
    """N <= finished <= N + workers - 1, every baseline once, nothing RUNNING, numbers contiguous."""
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert n <= len(finished) <= n + workers - 1, collections.Counter(t.state.name for t in trials)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert sorted(t.user_attrs["baseline"] for t in finished if "baseline" in t.user_attrs) == tags
    assert [t.number for t in trials] == list(range(len(trials)))
    sampled = [tuple(sorted(t.params.items())) for t in finished if "baseline" not in t.user_attrs]
    assert len(set(sampled)) == len(sampled), "two workers sampled the same point"


def wait_for_mid_trial_pid(cwd: pathlib.Path, timeout: float = 120) -> int:
    """The pid a slow trial wrote into the flag file a third into its run."""
    flag = cwd / MID_TRIAL_FLAG
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return int(flag.read_text())
        except (FileNotFoundError, ValueError):  # Not yet written, or half-written.
            time.sleep(0.02)
    raise AssertionError("no trial reached the middle of its run")


# -- placing workers ---------------------------------------------------------------------------


def test_plan_workers_on_a_cpu_machine():
    specs = plan_workers(3, "auto", "")
    assert [s.device for s in specs] == ["cpu"] * 3 and [s.index for s in specs] == [0, 1, 2]
    assert all(s.count == 3 and s.threads == threads_per_process() >= 1 for s in specs)
    with pytest.raises(DevicePlanError, match="CUDA is not available"):
        plan_workers(2, "auto", "0,1")
    with pytest.raises(DevicePlanError, match="CUDA is not available"):
        plan_workers(2, "cuda", "")


def test_sampler_seeds_differ_per_worker_and_per_process():
    a = sampler_seed(42, 10, worker=0, process="host-a:100")
    assert a == sampler_seed(42, 10, worker=0, process="host-a:100")
    others = {
        sampler_seed(42, 10, worker=1, process="host-a:100"),
        sampler_seed(42, 10, worker=0, process="host-a:101"),
        sampler_seed(42, 10, worker=0, process="host-b:100"),
        sampler_seed(42, 11, worker=0, process="host-a:100"),
        sampler_seed(43, 10, worker=0, process="host-a:100"),
    }
    assert a not in others and len(others) == 5


def test_devices_flag_is_bad_input_without_cuda(tmp_path):
    proc = run_cli(["--workers", "2", "--devices", "0,1"], tmp_path)
    assert proc.returncode == 2 and "CUDA is not available" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
    proc = run_cli(["--workers", "0"], tmp_path)
    assert proc.returncode == 2 and "workers must be >= 1" in proc.stderr


# -- one host, --workers -----------------------------------------------------------------------


def test_a_signal_the_parent_forwards_as_its_workers_start_reaches_them():
    """A Ctrl-C while the command started is forwarded the moment the workers exist. A worker is forked
    from a fork server that ignores SIGINT, and ignored it too until it restored its handlers: each of
    these heard nothing and ran 5 s (with seed-mlp, every worker ran the whole study)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        record_interrupts()  # As the command does from its start (search.cli._startup.started).
        os.kill(os.getpid(), signal.SIGINT)
        result = run_pool(listening_worker, plan_workers(2, "cpu", ""), (), poll=lambda: None)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert result.signum == signal.SIGINT and result.exit_codes == (130, 130)


def test_four_sqlite_workers_never_hit_database_is_locked(tmp_path):
    proc = run_process(["--trials", "30", "--epochs", "3", "--workers", "4"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "locked" not in proc.stderr and "Traceback" not in proc.stderr
    assert "4 workers" in proc.stdout
    trials = trials_of(f"sqlite:///{tmp_path / 'study.db'}", "seed-mlp")
    assert_study_is_sound(trials, 30, 4)
    assert not [t for t in trials if t.state == TrialState.FAIL]
    assert len({t.user_attrs["worker"] for t in trials}) >= 2  # Several processes really wrote trials.


def test_two_workers_on_mariadb_under_megatrons_rule(mysql_url, tmp_path):
    """Two workers on a MariaDB study of Megatron-LM's rule: its default once, every trial under the rule.
    (GradScaler studies with workers: on PostgreSQL, test_chaos.test_hard_restart_mid_run_under_two_workers,
    through a restart too; on SQLite, test_four_sqlite_workers_never_hit_database_is_locked.)"""
    url = mysql_url
    args = [
        "--trials",
        "16",
        "--epochs",
        "10",  # Enough for most sampled starts to learn, so the summary has Megatron's flags to paste.
        "--workers",
        "2",
        "--storage",
        url,
        "--scaler",
        "megatron",
        "--best-out",
        "best.json",
    ]
    proc = run_process(args, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2 workers on cpu" in proc.stdout and "Traceback" not in proc.stderr
    trials = trials_of(url, "seed-mlp")
    assert_study_is_sound(trials, 16, 2, tags=[tag for tag, _ in RULES["megatron"].baselines])
    default = next(t for t in trials if t.user_attrs.get("baseline") == RULES["megatron"].default_tag)
    space = settings_of(optuna.load_study(storage=url, study_name="seed-mlp")).space
    assert dict(setting_of(default.params, space, "megatron").values) == dict(RULES["megatron"].default)
    # Every trial ran the rule (its overflow steps are recorded) and the summary answers in Megatron's flags.
    assert all(OVERFLOW_STEPS in t.user_attrs for t in trials if t.state == TrialState.COMPLETE)
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["scaler"] == "megatron" and best["paste"]["megatron"]
    assert all(line in proc.stdout for line in best["paste"]["megatron"].splitlines())
    # Both workers really trained: each trial records the process that ran it.
    assert len({t.user_attrs["device"] for t in trials}) == 1
    assert len({t.user_attrs["worker"] for t in trials}) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json"]


_SIGNAL_AS_THE_SERVER_STARTS = """
import os, signal
from search.core import record_interrupts
from search.study import plan_workers, run_pool, worker_context
from tasks_for_tests import listening_worker
if __name__ == "__main__":
    record_interrupts()  # As the command does from its start.
    worker_context(listening_worker)  # The fork server is now importing torch, for a second or two.
    os.killpg(0, signal.SIGINT)  # A Ctrl-C to the terminal's group, this process's and the server's.
    result = run_pool(listening_worker, plan_workers(2, "cpu", ""), (), poll=lambda: None)
    print(result.signum, result.exit_codes)
"""


def test_a_ctrl_c_while_the_fork_server_starts_does_not_kill_it(tmp_path):
    """The server starts in the terminal's process group and leaves it only once it has imported ``search``:
    SIGINT then raised KeyboardInterrupt in it, and the run failed with "EOFError". It starts with the
    terminal's signals blocked (the resource tracker's own start had unblocked them in the parent)."""
    (tmp_path / "ctrl_c.py").write_text(_SIGNAL_AS_THE_SERVER_STARTS)
    # In a session of its own, as a terminal's job. Forked warm: what is checked is the fork server's start,
    # a new interpreter either way.
    proc = start_cli([], tmp_path, new_session=True, module="ctrl_c")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.split() == ["2", "(130,", "130)"], out + err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGHUP, 143)])
def test_ctrl_c_or_a_hang_up_stops_every_worker_and_leaves_nothing_running(tmp_path, signum, code):
    """To the whole process group, as a terminal sends Ctrl-C, or SIGHUP when it closes (forwarded as
    SIGTERM). Only the parent hears it: the workers and the fork server are out of the group, and
    multiprocessing's resource tracker ignores it (a hang-up killed it, with warnings and a traceback)."""
    proc = start_cli(["--trials", "40", "--task", SLOW, "--workers", "2"], tmp_path, new_session=True)
    wait_for_mid_trial_pid(tmp_path)
    os.killpg(proc.pid, signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Warning" not in err and f"Study '{SLOW_STUDY}'" in out
    assert f"interrupted by {signal.Signals(code - 128).name}" in err
    trials = trials_of(f"sqlite:///{tmp_path / 'study.db'}", SLOW_STUDY)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert 1 <= len(failed) <= 2 and all(
        t.user_attrs["fail_reason"].startswith("interrupted") for t in failed
    )
    # The message names the trials read back as cut short, not a guess (issue 15).
    assert f"recorded as FAIL: {', '.join(f'#{t.number}' for t in failed)}" in err, err


def test_a_dead_fork_server_leaves_the_parent_waiting_for_its_workers(tmp_path):
    """kill -9 of the fork server mid-run: its pipe then reads as exit 255 for every worker, though both still
    train. The parent waits for them by their process descriptors (it had said "run the same command again"
    while they trained on), and says their exit codes are unknown."""
    proc = start_cli(["--trials", "9", "--task", SLOW, "--workers", "2", "--epochs", "30"], tmp_path)
    wait_for_mid_trial_pid(tmp_path)
    server = fork_server_of(proc.pid)
    workers = child_pids(server)
    os.kill(server, signal.SIGKILL)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert (
        "fork server that started the workers died; workers 0, 1 ended; their exit codes are unknown" in err
    )
    assert "Traceback" not in err and "run the same command again" not in err
    for pid in workers:  # Ended (a zombie until init reaps it) before the parent summarised.
        status = pathlib.Path(f"/proc/{pid}/status")
        assert not status.exists() or "zombie" in status.read_text()
    assert_study_is_sound(trials_of(f"sqlite:///{tmp_path / 'study.db'}", SLOW_STUDY), 9, 2)


def test_sigterm_to_one_worker_stops_only_that_worker(tmp_path):
    proc = start_cli(["--trials", "7", "--task", SLOW, "--workers", "2", "--epochs", "30"], tmp_path)
    pid = wait_for_mid_trial_pid(tmp_path)
    assert pid != proc.pid
    os.kill(pid, signal.SIGTERM)  # One worker only; the parent and the other worker go on.
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "worker" in err and "exited with 143" in err and "Traceback" not in err
    trials = trials_of(f"sqlite:///{tmp_path / 'study.db'}", SLOW_STUDY)
    assert_study_is_sound(trials, 7, 2)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and failed[0].user_attrs["fail_reason"] == "interrupted (SIGTERM)"


# -- several hosts: independent processes on one database --------------------------------------


def test_hosts_starting_at_the_same_second_enqueue_baselines_once(postgres_url, tmp_path):
    args = ["--trials", "9", "--epochs", "3", "--storage", postgres_url, "--quiet"]
    procs = [start_cli(args, tmp_path) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in results]
    trials = trials_of(postgres_url, "seed-mlp")
    assert_study_is_sound(trials, 9, 3)
    assert sorted(t.user_attrs["baseline"] for t in trials if "baseline" in t.user_attrs) == TAGS


def test_killed_host_trial_is_failed_and_retried_by_a_live_peer(postgres_url, tmp_path):
    """kill -9 one of two hosts mid-baseline: the other fails its trial (heartbeat) and re-runs it."""
    args = ["--trials", "7", "--task", SLOW, "--storage", postgres_url, "--heartbeat-interval", "1"]
    procs = {p.pid: p for p in (start_cli(args, tmp_path), start_cli(args, tmp_path))}
    victim = wait_for_mid_trial_pid(tmp_path)
    killed_at = time.time()
    procs[victim].kill()  # SIGKILL: no handler runs; its claimed trial stays RUNNING.
    procs[victim].communicate(timeout=60)
    completed_before = {
        t.number for t in trials_of(postgres_url, SLOW_STUDY) if t.state == TrialState.COMPLETE
    }
    (survivor,) = [p for pid, p in procs.items() if pid != victim]
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    trials = trials_of(postgres_url, SLOW_STUDY)
    assert_study_is_sound(trials, 7, 2)
    assert completed_before <= {t.number for t in trials if t.state == TrialState.COMPLETE}
    failed = [t for t in trials if t.state == TrialState.FAIL]
    # The trial it had in flight, started before the kill. (A snapshot of RUNNING trials taken before the
    # kill missed it under load: the victim finished its flagged trial and started the next in between.)
    assert len(failed) == 1 and failed[0].datetime_start.timestamp() < killed_at
    assert "baseline" in failed[0].user_attrs  # Mid-baseline: the claimed kind of trial.
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].params == failed[0].params
    assert retry[0].user_attrs["baseline"] == failed[0].user_attrs["baseline"]


def test_killed_host_sampled_trial_is_failed_and_retried_by_a_live_peer(postgres_url, tmp_path):
    """On a shared database a sampled trial is RUNNING with a heartbeat while it trains: kill -9 its
    host mid-trial and the live host fails it and re-runs the same params."""
    args = ["--trials", "9", "--task", SLOW, "--storage", postgres_url, "--heartbeat-interval", "1"]
    procs = [start_cli(args, tmp_path), start_cli(args, tmp_path)]
    deadline = time.time() + 120
    while time.time() < deadline:  # Past the five baselines: from now on, trials are sampled.
        time.sleep(0.3)
        try:
            done = polled_trials(postgres_url, SLOW_STUDY, states=(TrialState.COMPLETE,))
        except KeyError:  # The study does not exist yet.
            continue
        if len(done) >= 6:
            break
    (tmp_path / MID_TRIAL_FLAG).unlink(missing_ok=True)
    victim = wait_for_mid_trial_pid(tmp_path)
    (killed,) = [p for p in procs if p.pid == victim]
    killed_at = time.time()
    killed.kill()
    killed.communicate(timeout=60)
    (survivor,) = [p for p in procs if p.pid != victim]
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    trials = trials_of(postgres_url, SLOW_STUDY)
    assert_study_is_sound(trials, 9, 2)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    # The trial it had in flight, started before the kill. (A snapshot of RUNNING trials taken before the
    # kill missed it under load: the victim finished its flagged trial and started the next in between.)
    assert len(failed) == 1 and failed[0].datetime_start.timestamp() < killed_at
    assert "baseline" not in failed[0].user_attrs  # A sampled trial, not a queued one.
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == failed[0].params


def test_threads_per_process(monkeypatch):
    """One torch thread unless asked: threads sharing cores with another process stall at barriers."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_process() == 1 and threads_per_process(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert threads_per_process() == 4 and threads_per_process(2) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert threads_per_process() == 1
    assert all(s.threads == 2 for s in plan_workers(3, "cpu", "", threads=2))


def test_negative_threads_is_bad_input(tmp_path):
    proc = run_cli(["--threads", "-1"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "threads must be >= 0" in proc.stderr
    assert list(tmp_path.iterdir()) == []

"""The order the suite's tests reach pytest-xdist's workers in: the long process tests first, spread evenly.

README's command runs ``-n 4 --dist worksteal``: each worker is first handed a contiguous quarter of the
collection, and steals from the others once its own is done. In collection order, the long tests of one
module (the worker and fault tests: processes started, killed, waited for) sit in one worker's quarter and run
one after another while the other workers run out of work. Here the tests of :data:`SPREAD` (modules without
module-scoped fixtures, so splitting them builds nothing twice) are dealt longest first to the quarter with
the least work so far, at its front; every other module keeps its tests together, in collection order,
filling each quarter to the size xdist gives it. Nothing is skipped and nothing is timed: only the order
changes.
"""

from __future__ import annotations

import pytest

SPREAD = (
    "tests/study/test_workers.py",
    "tests/study/test_chaos.py",
    "tests/commands/test_optimize_interrupts.py",
    "tests/cli/test_cli.py",
)

# Seconds a test of SPREAD took in README's command on the 2-core machine, by name; unlisted: 1.
SECONDS = {
    "test_outage_past_storage_retry_gives_up_in_one_line_then_resumes": 70,
    "test_kill_9_of_a_worker_mid_sampled_trial_then_resume": 57,
    "test_hard_restart_mid_run_under_two_workers": 40,
    "test_sigterm_to_one_worker_stops_only_that_worker": 38,
    "test_killed_host_sampled_trial_is_failed_and_retried_by_a_live_peer": 32,
    "test_a_study_killed_mid_baseline_is_finished_with_or_without_workers": 21,
    "test_two_workers_on_mariadb_under_megatrons_rule": 31,
    "test_killed_host_trial_is_failed_and_retried_by_a_live_peer": 30,
    "test_a_dead_fork_server_leaves_the_parent_waiting_for_its_workers": 30,
    "test_a_signal_between_start_up_and_the_trial_loop_stops_the_run_with_one_line": 20,
    "test_interrupt_leaves_no_running_trial": 24,
    "test_four_sqlite_workers_never_hit_database_is_locked": 25,
    "test_hosts_starting_at_the_same_second_enqueue_baselines_once": 25,
    "test_killed_worker_trial_is_failed_and_retried": 25,
    "test_summary_after_sigterm_counts_every_trial_another_process_finished": 21,
    "test_interrupted_baseline_is_run_again_on_resume": 17,
    "test_ctrl_c_or_a_hang_up_stops_every_worker_and_leaves_nothing_running": 13,
    "test_a_report_draws_its_importances_without_loading_scikit_learn": 10,
    "test_a_finished_study_with_a_dead_workers_baseline_is_not_done": 9,
    "test_a_ctrl_c_while_the_fork_server_starts_does_not_kill_it": 8,
}


def _seconds(item: pytest.Item) -> float:
    return SECONDS.get(getattr(item, "originalname", item.name), 1.0)


def _quarters(total: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares xdist's worksteal hands its idle workers at the start."""
    sizes = []
    for i in range(workers):
        sizes.append(total // (workers - i))
        total -= sizes[-1]
    return sizes


def scheduled(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` in the order of the module docstring, for ``workers`` workers."""
    spread = sorted((i for i in items if i.nodeid.split("::")[0] in SPREAD), key=lambda i: -_seconds(i))
    rest = iter([i for i in items if i.nodeid.split("::")[0] not in SPREAD])
    sizes = _quarters(len(items), workers)
    shares: list[list[pytest.Item]] = [[] for _ in sizes]
    work = [0.0] * workers
    for item in spread:
        open_shares = [k for k in range(workers) if len(shares[k]) < sizes[k]]
        k = min(open_shares, key=lambda k: (work[k], k))
        shares[k].append(item)
        work[k] += _seconds(item)
    for k, size in enumerate(sizes):
        shares[k] += [next(rest) for _ in range(size - len(shares[k]))]
    return [item for share in shares for item in share]

"""The trial loop: run trials until the study holds N finished ones.

Three ways a trial reaches storage, each a module of its own:

* **Sampled trials** (almost all; :mod:`search.study._sampled`): the sampler runs against an
  in-memory replica of the study (:mod:`search.study._replica`), training happens with no storage
  call at all, and the finished trial (params, value, every attr, intermediate values, the
  sampler's own system attrs) is written whole with one write
  (:class:`~search.storage._trial_writer.TrialWriter`) -- one transaction instead of one per param
  and per attr. Nothing of it is ever RUNNING in storage, so an interrupt or a crash cannot leave
  a stale RUNNING trial.
  When other processes may share the study (``shared``: ``--workers``, or a database server that
  other hosts can join), the sampled trial is instead registered RUNNING with its params in one
  transaction and beats while it trains (:mod:`search.storage._heartbeat`), so that if its worker
  dies a live one fails it and re-runs the same params; it is finished in one more transaction.
* **Populations** (``--population K``; :mod:`search.study._population_trials`): K sampled trials
  asked of the replica at once, trained together (:func:`search.training.run_population`) and
  written in one transaction; in a shared study registered RUNNING in one transaction, one
  heartbeat thread for all K, finished in one more.
* **Enqueued trials** (the baselines, and retries of failed ones; :mod:`search.study._queued`):
  claimed from storage with the same atomic pop as ``study.ask()`` (safe across processes and
  hosts), RUNNING with a heartbeat while they train, and finished in one transaction.

Every path trains through :mod:`search.study._trial_training`. Several workers (processes, hosts)
can run on one study: each checks the study's count before a trial, so the study ends with N to
N + workers - 1 finished trials. Between trials each worker fails the RUNNING trials of dead
workers (no heartbeat for twice the interval; :mod:`search.study._stale`), which Optuna's
``RetryHeartbeatStaleTrialCallback`` queues again. A worker that has reached N does not stop while
a peer's trial is RUNNING with a heartbeat, and runs every trial queued again, so that a dead
worker's trial is retried, never left RUNNING (each retry may add one finished trial past N).
Before it stops, a run measures the answer's line rounded (:mod:`search.study._rounding_trials`): one
to three more trials when the answer is a change. Every storage call rides out a brief outage
(:mod:`search.storage._retry`), and every write is stored once even when its acknowledgement is
lost (:mod:`search.storage._recorder`). Interrupts (SIGINT/SIGTERM) record the trial in flight as
FAIL and re-raise (:mod:`search.core._interrupts`); the message says what storage holds for it
(:mod:`search.study._in_flight`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from search.core import FINISHED, Interrupted, Settings, interrupts_as_exceptions
from search.storage import TrialRecorder, beating_trials, storage_of, with_retry
from search.study._in_flight import InFlight
from search.study._population_trials import run_population_trials
from search.study._queued import run_queued_trial
from search.study._replica import Replica
from search.study._rounding_trials import queue_rounding, rounding_note
from search.study._sampled import run_sampled_trial
from search.study._stale import fail_stale_trials
from search.study._trial_training import TrialTraining
from search.tasks.base import Problem


class TooManyFailures(RuntimeError):
    """``max_failed_trials`` trials failed in this run, or two the same way; ``trace``: their traceback, if
    any."""

    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace


@dataclass
class RunStats:
    """What this run did (not the whole study)."""

    completed: int = 0
    pruned: int = 0
    failed: int = 0
    fail_reasons: list[str] = field(default_factory=list)
    # (reason, traceback) of each trial the task's own code failed (not an interrupt or a timeout).
    task_failures: list[tuple[str, str]] = field(default_factory=list)
    stale_failed: int = 0  # RUNNING trials of stopped workers this run failed (Optuna queues them again).
    seconds: float = 0.0
    stop_reason: str = ""
    # After an interrupt: what became of the trial in flight, read back from storage (a trial can
    # finish between the signal and its handling, so "recorded as FAIL" is not a given).
    interrupted: str = ""


class Runner:
    """Runs trials of one study until it holds ``settings.run.trials`` finished trials.

    Args:
        study: The study in storage.
        settings: Validated settings.
        problem: The task's problem, already on ``device``.
        device_label: Stored with every trial.
        amp_dtype: Autocast dtype.
        sampler: The sampler (also used by the replica).
        pruner: The pruner, or None for no pruning.
        on_trial: Called after each trial with its state and value (progress bar).
        shared: Other processes may work on the study too: sampled trials are RUNNING in storage,
            with a heartbeat, while they train (two transactions per trial instead of one).
        steps: Optimizer steps of every trial (the run plan's ``steps_per_trial``).
    """

    def __init__(
        self,
        study: optuna.Study,
        settings: Settings,
        problem: Problem,
        device_label: str,
        amp_dtype: torch.dtype,
        sampler: optuna.samplers.BaseSampler,
        pruner: optuna.pruners.BasePruner | None,
        on_trial: Callable[[TrialState, float | None], None] | None = None,
        shared: bool = False,
        *,
        steps: int,
    ) -> None:
        self.study = study
        self.settings = settings
        self.on_trial = on_trial or (lambda state, value: None)
        self.replica = Replica(sampler, pruner or optuna.pruners.NopPruner())
        self.recorder = TrialRecorder(study, settings.run.storage_retry)
        self.stats = RunStats()
        self.shared = shared
        self.training = TrialTraining(problem, settings, device_label, amp_dtype, pruner, self.stats, steps)
        self.flight = InFlight()
        self._last_stale_check: float | None = None
        self.roundings_queued = (
            0  # Roundings of the answer's line this run enqueued (search.study._rounding_trials).
        )
        # The study after our last write and its finished count, when the write proves them.
        self._known: tuple[list[FrozenTrial], int] | None = None
        # The whole study when the loop stopped, where this process's last write proved it (the summary
        # needs no read of every trial then); else None.
        self.proven_study: list[FrozenTrial] | None = None

    def run(self) -> RunStats:
        """The loop. Raises :class:`Interrupted` or :class:`TooManyFailures` after recording."""
        run = self.settings.run
        start = time.perf_counter()
        try:
            with interrupts_as_exceptions():
                while True:
                    self.flight = InFlight()
                    self._fail_stale_trials()
                    proven = self._known is not None
                    if self._known is not None:  # Proven by our own write: every trial ended, none WAITING.
                        trials, finished = self._known
                        waiting, ended = False, True
                    else:
                        trials = self.storage_call(
                            lambda: self.study.get_trials(deepcopy=False), "reading trials"
                        )
                        states = collections.Counter(t.state for t in trials)
                        waiting = states[TrialState.WAITING] > 0
                        finished = sum(states[state] for state in FINISHED)
                        ended = finished + states[TrialState.FAIL] == len(trials)
                    self._known = None
                    reached = finished >= run.trials
                    if reached and not waiting and not self._peers_in_flight(trials):
                        if queue_rounding(self, trials):  # The answer's line rounded, measured first.
                            self._known = None
                            continue
                        self.stats.stop_reason = "trials reached" + rounding_note(self.roundings_queued)
                        self.proven_study = trials if proven else None
                        break
                    if run.timeout and time.perf_counter() - start >= run.timeout:
                        self.stats.stop_reason = f"timeout ({run.timeout:g} s)"
                        break
                    if reached and not waiting:
                        # A peer's trial is in flight: it finishes, or its worker died and the
                        # trial goes stale, is failed at the loop's top and queued again, to be
                        # run here. Stopping now could leave it RUNNING for good.
                        time.sleep(min(1.0, run.heartbeat_interval / 4))
                        continue
                    # A trial queued again (its worker died) runs even past N: a baseline ends up
                    # once among the finished trials, and no dead worker's trial is dropped.
                    if not (waiting and run_queued_trial(self)):
                        if run.population > 1:
                            run_population_trials(self, trials)
                        else:
                            run_sampled_trial(self, trials)
                            if (
                                not self.shared
                            ):  # Written whole by this process: the write may prove the study.
                                self._known = self._study_after_own_write(trials, finished, ended)
                    repeated = _repeated_failure(self.stats.task_failures)
                    if repeated is not None:
                        raise TooManyFailures(*repeated)
                    if self.stats.failed >= run.max_failed_trials:
                        raise TooManyFailures(
                            f"{self.stats.failed} trials failed in this run (--max-failed-trials "
                            f"{run.max_failed_trials}); last: {self.stats.fail_reasons[-1]}"
                        )
        except Interrupted:
            self.stats.interrupted = self.flight.what_became_of_it(storage_of(self.study))
            raise
        finally:
            self.stats.seconds = time.perf_counter() - start
        return self.stats

    def storage_call(self, call: Callable[[], Any], what: str) -> Any:
        """``call()``, riding out a brief outage of the storage (``what`` names it in messages)."""
        return with_retry(call, what=what, budget=self.settings.run.storage_retry)

    def stored_trial(self, trial_id: int) -> optuna.Trial:
        """The stored trial ``trial_id`` as an ``optuna.Trial``, to finish it or to set its params."""
        # Building a Trial reads it from storage: ridden through an outage like every other call.
        return self.storage_call(lambda: optuna.Trial(self.study, trial_id), "reading a trial")

    def _fail_stale_trials(self) -> None:
        # Trials of dead workers (kill -9, lost host) become FAIL and are queued again. Checked
        # at start and then at most once per heartbeat interval, by every worker.
        interval = self.settings.run.heartbeat_interval
        now = time.monotonic()
        if self._last_stale_check is not None and now - self._last_stale_check < interval:
            return
        self._last_stale_check = now
        self.stats.stale_failed += fail_stale_trials(self.study, self.storage_call)

    def _peers_in_flight(self, trials: list[FrozenTrial]) -> bool:
        """Whether other workers' trials are RUNNING with a heartbeat (only a shared study has them)."""
        if not self.shared or not any(t.state == TrialState.RUNNING for t in trials):
            return False
        return self.storage_call(lambda: beating_trials(self.study), "reading heartbeats") > 0

    def _study_after_own_write(
        self, before: list[FrozenTrial], finished: int, ended: bool
    ) -> tuple[list[FrozenTrial], int] | None:
        """The study right after this process's write, and its finished count, when the write proves it.

        Proof: the trial was numbered right after the trials last read (nobody added one in
        between), and none of those could still change (``ended``: none RUNNING or WAITING). Then
        the next loop needs no read of its own trial back (4-5 ms a trial on SQLite, a quarter of
        the overhead). Whatever others write after our commit is read at the next loop that reads.
        The list grows in place and the count by one, so that a trial costs the same in a study of
        5,000 trials as in one of 50.
        """
        written = self.recorder.last_written
        if written is None or written.number != len(before) or not ended:
            return None
        before.append(written)
        return before, finished + (written.state in FINISHED)


def _repeated_failure(failures: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The stop message and traceback when the task's code failed twice the same way, or None.

    Two trials that raise the same error at the same line fail for the task, not for their scaler
    settings: the next eight would too.
    """
    if len(failures) < 2 or failures[-1] not in failures[:-1]:
        return None
    reason, trace = failures[-1]
    return f"two trials failed the same way, so the task fails, not its scaler settings: {reason}", trace

"""The trial loop: run trials until the study holds N finished ones.

Two ways a trial reaches storage:

* **Sampled trials** (almost all): the sampler runs against an in-memory replica of the study
  (:mod:`search.study._replica`), training happens with no storage call at all, and the finished trial
  (params, value, every attr, intermediate values, the sampler's own system attrs) is written
  whole with one write (:class:`~search.storage._trial_writer.TrialWriter`) -- one transaction instead of
  one per param and per attr. Nothing of it is ever RUNNING in storage, so an interrupt or a
  crash cannot leave a stale RUNNING trial.
  When other processes may share the study (``shared``: ``--workers``, or a database server that
  other hosts can join), the sampled trial is instead registered RUNNING with its params in one
  transaction and beats while it trains (:mod:`search.storage._heartbeat`), so that if its worker dies a
  live one fails it and re-runs the same params; it is finished in one more transaction.
* **Populations** (``--population K``): K sampled trials asked of the replica at once, trained
  together (:func:`search.training._objective.run_population`) and written in one transaction; in a shared
  study registered RUNNING in one transaction, one heartbeat thread for all K, finished in one more.
* **Enqueued trials** (the seed baselines, and retries of failed ones): claimed from storage
  with the same atomic pop as ``study.ask()`` (safe across processes and hosts), RUNNING with a
  heartbeat while they train, and finished in one transaction.

Several workers (processes, hosts) can run on one study: each checks the study's count before a
trial, so the study ends with N to N + workers - 1 finished trials. Between trials each worker
fails the RUNNING trials of dead workers (no heartbeat for twice the interval), which Optuna's
``RetryHeartbeatStaleTrialCallback`` queues again. Every storage call rides out a brief outage
(:mod:`search.storage._retry`), and every write is stored once even when its acknowledgement is lost
(:mod:`search.storage._recorder`). Interrupts (SIGINT/SIGTERM) record the trial in flight as FAIL and
re-raise (:mod:`search.core._interrupts`).
"""

from __future__ import annotations

import contextlib
import datetime
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from search.core import (
    BASELINE,
    DEVICE,
    FAIL_REASON,
    FINISHED,
    Interrupted,
    ScalerConfig,
    Settings,
    baseline_of,
    deferred_interrupts,
    held_interrupts,
    interrupts_as_exceptions,
    process_token,
    suggest,
)
from search.core import WORKER as WORKER_ATTR
from search.storage import Finish, NewTrial, TrialRecorder, first_beat, heartbeat, with_retry
from search.study._replica import Replica
from search.tasks import TaskError
from search.tasks.base import Problem
from search.training import TrialOutcome, run_population, run_trial

__all__ = ["RunStats", "Runner", "TooManyFailures"]

WORKER = process_token()  # Which process ran a trial (user attr "worker").


class TooManyFailures(RuntimeError):
    """``max_failed_trials`` trials failed in this run."""


@dataclass
class RunStats:
    """What this run did (not the whole study)."""

    completed: int = 0
    pruned: int = 0
    failed: int = 0
    fail_reasons: list[str] = field(default_factory=list)
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
    ) -> None:
        self.study = study
        self.settings = settings
        self.problem = problem
        self.device_label = device_label
        self.amp_dtype = amp_dtype
        self.pruner = pruner
        self.on_trial = on_trial or (lambda state, value: None)
        self.replica = Replica(sampler, pruner or optuna.pruners.NopPruner())
        self.recorder = TrialRecorder(study, settings.run.storage_retry)
        self.stats = RunStats()
        self._last_stale_check: float | None = None
        self.shared = shared
        self._handling = False  # A trial is being claimed, sampled, trained or recorded.
        self._in_flight: int | None = None  # Its storage id, once it has one.
        self._population: list[int] | None = None  # A population in flight: its storage ids, once stored.
        self._known: list[FrozenTrial] | None = None  # The study after our last write, when it proves it.
        # The first optimizer a process builds costs ~1 s of lazy imports in torch 2.13; pay it
        # here so that the first trial's train_seconds is comparable with the others.
        with contextlib.suppress(Exception):  # A broken factory fails in the trials, recorded.
            problem.make_optimizer([torch.nn.Parameter(torch.zeros(1, device=problem.inputs.device))])

    def run(self) -> RunStats:
        """The loop. Raises :class:`Interrupted` or :class:`TooManyFailures` after recording."""
        run = self.settings.run
        start = time.perf_counter()
        try:
            with interrupts_as_exceptions():
                while True:
                    self._handling, self._in_flight, self._population = False, None, None
                    self._fail_stale_trials()
                    trials = self._known
                    if trials is None:
                        trials = self._storage_call(lambda: self.study.get_trials(deepcopy=False), "reading trials")
                    self._known = None
                    queued_baseline = any(t.state == TrialState.WAITING and baseline_of(t) for t in trials)
                    if sum(t.state in FINISHED for t in trials) >= run.trials and not queued_baseline:
                        # A baseline queued again (its worker died) still runs: each ends up once.
                        self.stats.stop_reason = "trials reached"
                        break
                    if run.timeout and time.perf_counter() - start >= run.timeout:
                        self.stats.stop_reason = f"timeout ({run.timeout:g} s)"
                        break
                    waiting = any(t.state == TrialState.WAITING for t in trials)
                    if not (waiting and self._run_enqueued()):
                        if run.population > 1:
                            self._run_population(trials)
                        else:
                            self._run_sampled(trials)
                    if self.stats.failed >= run.max_failed_trials:
                        raise TooManyFailures(
                            f"{self.stats.failed} trials failed in this run (--max-failed-trials "
                            f"{run.max_failed_trials}); last: {self.stats.fail_reasons[-1]}"
                        )
        except Interrupted:
            self.stats.interrupted = self._what_became_of_the_trial_in_flight()
            raise
        finally:
            self.stats.seconds = time.perf_counter() - start
        return self.stats

    def _what_became_of_the_trial_in_flight(self) -> str:
        """One clause for the interrupt message, from the trial's state as stored now."""
        if not self._handling:
            return "no trial was in flight"
        if self._population is not None:
            return self._what_became_of_the_population()
        if self._in_flight is None:
            return "the trial in flight had not been stored yet; nothing of it was kept"
        trial_id = self._in_flight
        try:  # One read, no retries: the user asked to stop.
            stored = self.study._storage.get_trial(trial_id)
        except Exception:
            return "the trial in flight was recorded, but its state could not be read back"
        if stored.state == TrialState.FAIL:
            return f"trial {stored.number}, in flight, was recorded as FAIL"
        if stored.state.is_finished():
            return f"trial {stored.number} finished {stored.state.name} before the signal was handled"
        return f"trial {stored.number} is still {stored.state.name} in storage"

    def _what_became_of_the_population(self) -> str:
        assert self._population is not None
        if not self._population:
            return "the population in flight had not been stored yet; nothing of it was kept"
        try:  # One read, no retries: the user asked to stop.
            stored = [self.study._storage.get_trial(trial_id) for trial_id in self._population]
        except Exception:
            return "the population in flight was recorded, but its states could not be read back"
        numbers = f"trials {stored[0].number}-{stored[-1].number} (a population of {len(stored)})"
        states = sorted({t.state for t in stored}, key=lambda state: state.name)
        if states == [TrialState.FAIL]:
            return f"{numbers}, in flight, were recorded as FAIL"
        counts = ", ".join(f"{sum(t.state == state for t in stored)} {state.name}" for state in states)
        if all(state.is_finished() for state in states):
            return f"{numbers} finished before the signal was handled: {counts}"
        return f"{numbers} are in storage as {counts}"

    def _fail_stale_trials(self) -> None:
        # Trials of dead workers (kill -9, lost host) become FAIL and are queued again. Checked
        # at start and then at most once per heartbeat interval, by every worker.
        interval = self.settings.run.heartbeat_interval
        now = time.monotonic()
        if self._last_stale_check is not None and now - self._last_stale_check < interval:
            return
        self._last_stale_check = now
        def stale_fails() -> set[int]:
            # Optuna fails a stale trial without a fail_reason; every trial we fail has one.
            trials = self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            return {t.number for t in trials if FAIL_REASON not in t.user_attrs}

        before = self._storage_call(stale_fails, "reading failed trials")
        with warnings.catch_warnings():  # "Experimental" since Optuna 2.9.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._storage_call(lambda: optuna.storages.fail_stale_trials(self.study), "failing stale trials")
        self.stats.stale_failed += len(self._storage_call(stale_fails, "reading failed trials") - before)

    def _storage_call(self, call: Callable[[], Any], what: str) -> Any:
        return with_retry(call, what=what, budget=self.settings.run.storage_retry)

    # -- queued trials: claimed from storage ---------------------------------------------------

    def _run_enqueued(self) -> bool:
        """Runs one queued trial; False when another worker claimed the last one first."""
        # A signal during the claim is held and raised inside the try below, so that the claimed
        # (RUNNING) trial is recorded as FAIL and its baseline queued again, never left RUNNING.
        self._handling = True
        with held_interrupts() as pending:
            trial = self._claim()
            self._in_flight = trial._trial_id if trial is not None else None
        if trial is None:
            if pending:
                raise Interrupted(pending[0])
            return False
        try:
            if pending:
                raise Interrupted(pending[0])
            with heartbeat(self.study, trial._trial_id):
                duplicate = self._duplicate_of(trial)
                if duplicate is not None:
                    self.recorder.finish(trial, TrialState.FAIL, None, {FAIL_REASON: duplicate})
                    return True
                # A queued trial's fixed params are written to storage here (idempotent, so retried).
                scaler_config = self._storage_call(lambda: suggest(trial, self.settings.space), "setting params")
                outcome = self._train(trial, scaler_config)
        except BaseException as error:
            attrs = self._failure_attrs(error)
            with deferred_interrupts():
                self.recorder.finish(trial, TrialState.FAIL, None, attrs)
                self.recorder.requeue_baseline(trial)
            self.on_trial(TrialState.FAIL, None)
            if isinstance(error, Exception):
                return True
            _raise_task_exit(error)
            raise
        state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
        # A signal held during the write is raised only after the trial is counted, so that the
        # progress bar and the interrupt message agree with what storage holds.
        with held_interrupts() as pending:
            value = outcome.value if state == TrialState.COMPLETE else None
            recorded = self.recorder.finish(trial, state, value, outcome.user_attrs, outcome.intermediate_values)
        if recorded:
            self._count(state)
            self.on_trial(state, outcome.value)
        if pending:
            raise Interrupted(pending[0])
        return True

    def _claim(self) -> optuna.Trial | None:
        """Claims a WAITING trial (like ``study.ask``'s atomic pop, without its fallback to sampling).

        Its first heartbeat is part of the claim, so that it can be found stale if this process
        dies (or gives up on an outage) before the heartbeat thread starts: Optuna ignores RUNNING
        trials with no heartbeat.
        """
        writer = self.recorder.writer
        trial_id = self._storage_call(lambda: writer.claim(first=BASELINE), "claiming a queued trial")
        if trial_id is None:
            return None
        if not writer.batched:  # Another storage: the claim could not beat.
            first_beat(self.study, trial_id, self.settings.run.storage_retry)
        return self._trial(trial_id)

    def _trial(self, trial_id: int) -> optuna.Trial:
        # Building a Trial reads it from storage: ridden through an outage like every other call.
        return self._storage_call(lambda: optuna.Trial(self.study, trial_id), "reading a trial")

    def _duplicate_of(self, trial: optuna.Trial) -> str | None:
        # A safety net for exactly-once baselines: a retry queued by Optuna's stale-trial
        # callback can race with a resume that re-enqueues the same failed baseline.
        tag = baseline_of(trial)
        if tag is None:
            return None
        others = self._storage_call(lambda: self.study.get_trials(deepcopy=False), "reading trials")
        for other in others:
            if (
                other.number != trial.number
                and baseline_of(other) == tag
                and (other.state in FINISHED or other.state == TrialState.RUNNING)
            ):
                return f"duplicate of baseline {tag} (trial {other.number}); not run"
        return None

    # -- sampled trials: asked of the replica --------------------------------------------------

    def _run_sampled(self, trials: list[FrozenTrial]) -> None:
        self._handling = True
        started = datetime.datetime.now()
        self.replica.sync(trials)
        trial = self.replica.study.ask()
        scaler_config = suggest(trial, self.settings.space)
        if self.shared:
            self._run_registered(trial, scaler_config, started)
            return

        def record(state: TrialState, value: float | None, attrs: dict, values: dict[int, float]) -> bool:
            # The replica's trial carries the params and the sampler's system attrs.
            self._in_flight = self.recorder.write(self.replica.frozen(trial), state, value, attrs, values, started)
            self._known = self._study_after_own_write(trials)
            return True

        self._train_and_record(trial, lambda: self._train(trial, scaler_config), record)

    def _study_after_own_write(self, before: list[FrozenTrial]) -> list[FrozenTrial] | None:
        """The study as it is right after this process's write, when the write proves it; else None.

        Proof: the trial was numbered right after the trials last read (nobody added one in
        between), and none of those could still change (none RUNNING or WAITING). Then the next
        loop needs no read of its own trial back (4-5 ms a trial on SQLite, a quarter of the
        overhead). Whatever others write after our commit is read at the next loop that reads.
        """
        written = self.recorder.last_written
        if written is None or written.number != len(before) or not all(t.state.is_finished() for t in before):
            return None
        return [*before, written]

    def _run_registered(self, trial: optuna.Trial, scaler_config: ScalerConfig, started: datetime.datetime) -> None:
        """A sampled trial that is RUNNING in storage, with a heartbeat, while it trains."""
        with held_interrupts() as pending:
            # Registered with its first heartbeat in the same transaction (TrialWriter.add).
            trial_id = self.recorder.write(self.replica.frozen(trial), TrialState.RUNNING, None, {}, {}, started)
            self._in_flight = trial_id
            if not self.recorder.writer.batched:
                first_beat(self.study, trial_id, self.settings.run.storage_retry)
            stored = self._trial(trial_id)

        def train() -> TrialOutcome:
            if pending:
                raise Interrupted(pending[0])
            with heartbeat(self.study, trial_id):
                return self._train(trial, scaler_config)  # Pruning reports go to the replica.

        def record(state: TrialState, value: float | None, attrs: dict, values: dict[int, float]) -> bool:
            return self.recorder.finish(stored, state, value, attrs, values)

        self._train_and_record(trial, train, record)

    def _train_and_record(
        self,
        trial: optuna.Trial,
        train: Callable[[], TrialOutcome],
        record: Callable[[TrialState, float | None, dict, dict[int, float]], bool],
    ) -> None:
        """Trains a sampled trial and records how it ended; ``record`` is False when a peer failed it first."""
        try:
            outcome = train()
        except BaseException as error:
            attrs = self._failure_attrs(error)
            with deferred_interrupts():
                record(TrialState.FAIL, None, attrs, {})
                self.replica.discard(trial)
            self.on_trial(TrialState.FAIL, None)
            if isinstance(error, Exception):
                return
            _raise_task_exit(error)
            raise
        state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
        value = outcome.value if state == TrialState.COMPLETE else None
        with held_interrupts() as pending:  # Raised after counting, as in _run_enqueued.
            recorded = record(state, value, outcome.user_attrs, outcome.intermediate_values)
            self.replica.discard(trial)
        if recorded:
            self._count(state)
            self.on_trial(state, outcome.value)
        if pending:
            raise Interrupted(pending[0])

    # -- a population of sampled trials, trained together -------------------------------------

    def _population_size(self, trials: list[FrozenTrial]) -> int:
        """K, or fewer at the end: the trials still needed, so that --trials means N with one worker.

        Trials RUNNING in storage (a peer's) count as needed already: two workers of a
        population each take a share instead of both taking K, and the study ends with N to
        N + K - 1. At least one, as a worker with nothing left to share runs one trial like an
        ordinary worker would.
        """
        run = self.settings.run
        busy = sum(t.state in FINISHED or t.state == TrialState.RUNNING for t in trials)
        return max(1, min(run.population, run.trials - busy))

    def _run_population(self, trials: list[FrozenTrial]) -> None:
        """K sampled trials: K asks of the replica, trained at once, written in one transaction.

        Each member's record is an ordinary trial's (:func:`search.training._objective.outcome_of`), plus the
        population's size. In a shared study the K trials are RUNNING in storage (registered in one
        transaction, one heartbeat thread for all) and finished in one more; otherwise nothing of
        them reaches storage before they are written finished. An exception fails all K with its
        reason; an interrupt fails all K as interrupted and re-raises; --trial-timeout applies to
        the population as a whole.
        """
        self._handling = True
        self._population = []
        started = datetime.datetime.now()
        self.replica.sync(trials)
        members = [self.replica.study.ask() for _ in range(self._population_size(trials))]
        configs = [suggest(trial, self.settings.space) for trial in members]
        stored: list[optuna.Trial] = []
        pending: list[int] = []
        if self.shared:
            with held_interrupts() as pending:  # Registered whole, never half: raised inside the try below.
                new = [NewTrial(self.replica.frozen(trial), TrialState.RUNNING) for trial in members]
                ids = self.recorder.write_many(new, started)
                self._population = ids
                stored = [self._trial(trial_id) for trial_id in ids]

        def record(
            states: list[TrialState], values: list[float | None], attrs: list[dict], curves: list[dict[int, float]]
        ) -> list[bool]:
            """Writes how the K members ended, in one transaction; per member, False when a peer failed it first."""
            entries = list(zip(states, values, attrs, curves))
            if self.shared:
                return self.recorder.finish_many([Finish(t, *entry) for t, entry in zip(stored, entries)])
            new = [NewTrial(self.replica.frozen(t), *entry) for t, entry in zip(members, entries)]
            self._population = self.recorder.write_many(new, started)
            return [True] * len(members)

        try:
            if pending:
                raise Interrupted(pending[0])
            with heartbeat(self.study, self._population) if self.shared else contextlib.nullcontext():
                outcomes = self._train_population(members, configs)
        except BaseException as error:
            attrs, k = self._failure_attrs(error, len(members)), len(members)
            with deferred_interrupts():
                record([TrialState.FAIL] * k, [None] * k, [dict(attrs) for _ in range(k)], [{} for _ in range(k)])
                for trial in members:
                    self.replica.discard(trial)
            for _ in members:
                self.on_trial(TrialState.FAIL, None)
            if isinstance(error, Exception):
                return
            _raise_task_exit(error)
            raise
        states = [TrialState.PRUNED if o.pruned else TrialState.COMPLETE for o in outcomes]
        values = [o.value if state == TrialState.COMPLETE else None for o, state in zip(outcomes, states)]
        with held_interrupts() as pending:  # Raised after counting, as in _run_enqueued.
            attrs = [o.user_attrs for o in outcomes]
            recorded = record(states, values, attrs, [o.intermediate_values for o in outcomes])
            for trial in members:
                self.replica.discard(trial)
        for outcome, state, was_recorded in zip(outcomes, states, recorded):
            if was_recorded:
                self._count(state)
                self.on_trial(state, outcome.value)
        if pending:
            raise Interrupted(pending[0])

    def _train_population(self, members: list[optuna.Trial], configs: list[ScalerConfig]) -> list[TrialOutcome]:
        # --trial-timeout: one deadline for the whole population (its members end together).
        should_prune = [_pruning_judge(trial) for trial in members] if self.pruner is not None else None
        outcomes = run_population(self.problem, configs, should_prune=should_prune, **self._training_kwargs())
        for outcome in outcomes:
            outcome.user_attrs[WORKER_ATTR] = WORKER
        return outcomes

    # -- one trial -----------------------------------------------------------------------------

    def _train(self, trial: optuna.Trial, scaler_config: ScalerConfig) -> TrialOutcome:
        should_prune = _pruning_judge(trial) if self.pruner is not None else None
        outcome = run_trial(self.problem, scaler_config, should_prune=should_prune, **self._training_kwargs())
        outcome.user_attrs[WORKER_ATTR] = WORKER
        return outcome

    def _training_kwargs(self) -> dict[str, Any]:
        """What a trial and a population train with, from the settings; the deadline starts now."""
        run = self.settings.run
        return {
            "epochs": run.epochs or self.problem.epochs,
            "steps": run.steps or None,
            "amp_dtype": self.amp_dtype,
            "penalty": self.settings.penalty,
            "device_label": self.device_label,
            "deadline": time.perf_counter() + run.trial_timeout if run.trial_timeout else None,
        }

    def _failure_attrs(self, error: BaseException, trials: int = 1) -> dict[str, Any]:
        """The attrs of a trial that failed with ``error``; ``trials`` counts a population's K as K failures."""
        if isinstance(error, Interrupted):
            reason = f"interrupted ({error})"
            if trials > 1:
                reason += f", with the {trials} trials of its population"
        else:
            reason = f"{type(error).__name__}: {error}".strip()[:500]
            if isinstance(error, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        self.stats.failed += trials
        self.stats.fail_reasons += [reason] * trials
        return {FAIL_REASON: reason, DEVICE: self.device_label, WORKER_ATTR: WORKER}

    def _count(self, state: TrialState) -> None:
        if state == TrialState.COMPLETE:
            self.stats.completed += 1
        else:
            self.stats.pruned += 1


def _pruning_judge(trial: optuna.Trial) -> Callable[[int, float], bool]:
    """The pruner's verdict on ``trial`` (the replica's copy) after each reported loss."""

    def should_prune(step: int, loss: float) -> bool:
        trial.report(loss, step)
        return trial.should_prune()

    return should_prune


def _raise_task_exit(error: BaseException) -> None:
    """A task's ``sys.exit`` during a trial (recorded as FAIL) ends the run as an error, not a success."""
    if isinstance(error, SystemExit):
        raise TaskError(f"the task called sys.exit({error.code!r}) during a trial (recorded as FAIL)") from error

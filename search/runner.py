"""The trial loop: run trials until the study holds N finished ones.

Two ways a trial reaches storage:

* **Sampled trials** (almost all): the sampler runs against an in-memory replica of the study,
  training happens with no storage call at all, and the finished trial (params, value, every
  attr, intermediate values, the sampler's own system attrs) is written whole with one
  write (:class:`~search.trial_writer.TrialWriter`) -- one transaction instead of one per param
  and per attr. Nothing of it
  is ever RUNNING in storage, so an interrupt or a crash cannot leave a stale RUNNING trial.
* **Enqueued trials** (the seed baselines, and retries of failed ones): claimed from storage
  with ``study.ask()`` (atomic across processes), recorded with ``tell``.

Interrupts (SIGINT/SIGTERM) record the trial in flight as FAIL and re-raise.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from search.config import Settings
from search.objective import TrialOutcome, run_trial
from search.space import suggest
from search.study import BASELINE_ATTR
from search.tasks.base import Problem
from search.trainer import ScalerConfig
from search.trial_writer import TrialWriter

__all__ = ["Interrupted", "RunStats", "Runner", "TooManyFailures"]

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class TooManyFailures(RuntimeError):
    """``max_failed_trials`` trials failed in this run."""


@dataclass
class RunStats:
    """What this run did (not the whole study)."""

    completed: int = 0
    pruned: int = 0
    failed: int = 0
    fail_reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stop_reason: str = ""


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Turns SIGINT and SIGTERM into :class:`Interrupted` while the loop runs."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Holds SIGINT/SIGTERM back while a storage write runs, then delivers it."""
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: pending.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if pending:
            raise Interrupted(pending[0])


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial_id: int) -> Iterator[None]:
    """Records the heartbeat of a RUNNING trial in storage while the block runs.

    Optuna beats only inside ``study.optimize``; this loop claims trials with ``ask``, so it
    beats itself, through the storage's public ``record_heartbeat``.
    """
    storage = study._storage
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if not interval:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            storage.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class _Replica:
    """An in-memory copy of the study's finished trials that the sampler runs against."""

    def __init__(self, sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner) -> None:
        self.study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
        self._seen: set[int] = set()

    def sync(self, trials: list[FrozenTrial]) -> None:
        for t in trials:
            if t.state.is_finished() and t._trial_id not in self._seen:
                self._seen.add(t._trial_id)
                self.study.add_trial(t)

    def frozen(self, trial: optuna.Trial) -> FrozenTrial:
        """The replica's record of ``trial``: params and the sampler's system attrs."""
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return next(t for t in running if t.number == trial.number)

    def discard(self, trial: optuna.Trial) -> None:
        # The real copy arrives with the next sync; samplers ignore FAIL trials.
        self.study.tell(trial, state=TrialState.FAIL)


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
    ) -> None:
        self.study = study
        self.settings = settings
        self.problem = problem
        self.device_label = device_label
        self.amp_dtype = amp_dtype
        self.pruner = pruner
        self.on_trial = on_trial or (lambda state, value: None)
        self.replica = _Replica(sampler, pruner or optuna.pruners.NopPruner())
        self.writer = TrialWriter(study)
        self.stats = RunStats()
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
                # Trials of dead workers (kill -9, lost host) become FAIL and are queued again.
                with warnings.catch_warnings():  # "Experimental" since Optuna 2.9.
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(self.study)
                while True:
                    trials = self.study.get_trials(deepcopy=False)
                    if sum(t.state in FINISHED for t in trials) >= run.trials:
                        self.stats.stop_reason = "trials reached"
                        break
                    if run.timeout and time.perf_counter() - start >= run.timeout:
                        self.stats.stop_reason = f"timeout ({run.timeout:g} s)"
                        break
                    if any(t.state == TrialState.WAITING for t in trials):
                        self._run_enqueued()
                    else:
                        self._run_sampled(trials)
                    if self.stats.failed >= run.max_failed_trials:
                        raise TooManyFailures(
                            f"{self.stats.failed} trials failed in this run (--max-failed-trials "
                            f"{run.max_failed_trials}); last: {self.stats.fail_reasons[-1]}"
                        )
        finally:
            self.stats.seconds = time.perf_counter() - start
        return self.stats

    # -- one trial -------------------------------------------------------------------------

    def _train(self, trial: optuna.Trial, scaler_config: ScalerConfig) -> TrialOutcome:
        run = self.settings.run
        deadline = time.perf_counter() + run.trial_timeout if run.trial_timeout else None
        should_prune = None
        if self.pruner is not None:

            def should_prune(epoch: int, loss: float) -> bool:
                trial.report(loss, epoch)
                return trial.should_prune()

        return run_trial(
            self.problem,
            scaler_config,
            epochs=run.epochs,
            amp_dtype=self.amp_dtype,
            penalty=self.settings.penalty,
            device_label=self.device_label,
            deadline=deadline,
            should_prune=should_prune,
        )

    def _failure_attrs(self, error: BaseException) -> dict[str, Any]:
        if isinstance(error, Interrupted):
            reason = f"interrupted ({error})"
        else:
            reason = f"{type(error).__name__}: {error}".strip()[:500]
            if isinstance(error, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        self.stats.failed += 1
        self.stats.fail_reasons.append(reason)
        return {"fail_reason": reason, "device": self.device_label}

    def _run_sampled(self, trials: list[FrozenTrial]) -> None:
        started = datetime.datetime.now()
        self.replica.sync(trials)
        trial = self.replica.study.ask()
        scaler_config = suggest(trial, self.settings.space)
        try:
            outcome = self._train(trial, scaler_config)
        except BaseException as error:
            attrs = self._failure_attrs(error)
            with deferred_interrupts():
                self._write(self.replica.frozen(trial), TrialState.FAIL, None, attrs, {}, started)
                self.replica.discard(trial)
            self.on_trial(TrialState.FAIL, None)
            if isinstance(error, Exception):
                return
            raise
        state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
        value = outcome.value if state == TrialState.COMPLETE else None
        with deferred_interrupts():
            self._write(
                self.replica.frozen(trial),
                state,
                value,
                outcome.user_attrs,
                outcome.intermediate_values,
                started,
            )
            self.replica.discard(trial)
        self._count(state)
        self.on_trial(state, outcome.value)

    def _write(
        self,
        template: FrozenTrial,
        state: TrialState,
        value: float | None,
        user_attrs: dict[str, Any],
        intermediate_values: dict[int, float],
        started: datetime.datetime,
    ) -> None:
        # ``template`` carries the params and the sampler's system attrs from the replica.
        trial = optuna.trial.create_trial(
            state=state,
            value=value,
            params=template.params,
            distributions=template.distributions,
            user_attrs=user_attrs,
            system_attrs=template.system_attrs,
            intermediate_values=intermediate_values,
        )
        trial.datetime_start = started
        self.writer.add(trial)

    def _run_enqueued(self) -> None:
        with deferred_interrupts():  # Claimed is RUNNING: an interrupt must find it in the try.
            trial = self.study.ask()
        try:
            with heartbeat(self.study, trial._trial_id):
                scaler_config = suggest(trial, self.settings.space)
                outcome = self._train(trial, scaler_config)
        except BaseException as error:
            attrs = self._failure_attrs(error)
            with deferred_interrupts():
                self.writer.finish(trial, TrialState.FAIL, None, attrs)
                self._requeue_baseline(trial)
            self.on_trial(TrialState.FAIL, None)
            if isinstance(error, Exception):
                return
            raise
        state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
        with deferred_interrupts():
            value = outcome.value if state == TrialState.COMPLETE else None
            self.writer.finish(trial, state, value, outcome.user_attrs)
        self._count(state)
        self.on_trial(state, outcome.value)

    def _requeue_baseline(self, trial: optuna.Trial) -> None:
        # A failed baseline runs again, so every study ends with the seed's full table.
        tag = trial.user_attrs.get(BASELINE_ATTR)
        if tag is not None:
            self.study.enqueue_trial(trial.params, user_attrs={BASELINE_ATTR: tag})

    def _count(self, state: TrialState) -> None:
        if state == TrialState.COMPLETE:
            self.stats.completed += 1
        else:
            self.stats.pruned += 1

"""Recording the trial loop's trials in storage exactly once, through an outage and beside peers.

Every write is retried through a brief outage (:func:`search.storage._retry.with_retry`). Retrying is safe
for a transaction that failed, since it was rolled back; it is not for one whose commit went
through but whose acknowledgement was lost (the connection dropped at that moment): that write
took effect, and repeating it would store it twice. So before each retry the recorder looks for
the effect of the attempt before:

* A new trial (:meth:`TrialRecorder.write`: a sampled trial, finished or registered RUNNING)
  carries a fresh id in its system attr ``search:write_id``; a stored trial with that id is
  this write, already done.
* A population's trials (:meth:`TrialRecorder.write_many`, :meth:`TrialRecorder.finish_many`) are
  written in one transaction, each checked as above.
* A RUNNING trial being finished (:meth:`TrialRecorder.finish`) is read back: finished in the
  state being written, the lost acknowledgement did it; in another state, a peer took this
  worker for dead (no heartbeat for too long) and failed it first. The peer's FAIL stands, and
  Optuna's retry of it runs the trial again.

A failed baseline is queued again only if no unfailed trial holds it
(:meth:`TrialRecorder.requeue_baseline`, through
:meth:`search.storage._trial_writer.TrialWriter.enqueue_once`).
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import BASELINE, baseline_of, waiting_baseline
from search.storage._optuna_internals import as_stored, storage_of, trial_id_of
from search.storage._retry import with_retry
from search.storage._trial_writer import Finish, Running, TrialWriter

WRITE_ID_ATTR = "search:write_id"  # Makes a retried write of a sampled trial idempotent.
_logger = logging.getLogger("search")


@dataclass(frozen=True)
class NewTrial:
    """One trial of :meth:`TrialRecorder.write_many`: the replica's record (params, sampler attrs) and how it
    ended."""

    template: FrozenTrial
    state: TrialState
    value: float | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)
    intermediate_values: dict[int, float] = field(default_factory=dict)


class TrialRecorder:
    """Writes the trials of one study for the trial loop, each once, retried through an outage.

    Args:
        study: The study in storage.
        retry_budget: Seconds to keep retrying an unreachable database (``--storage-retry``).
    """

    def __init__(self, study: optuna.Study, retry_budget: float) -> None:
        self.study = study
        self.writer = TrialWriter(study)
        self.retry_budget = retry_budget
        # The trial the last :meth:`write` stored, as a read would return it, when this process's
        # own add committed it (not found after a lost acknowledgement); else None.
        self.last_written: FrozenTrial | None = None
        # Likewise the trials the last :meth:`write_many` stored, in order.
        self.last_written_many: list[FrozenTrial] | None = None

    def write(
        self,
        template: FrozenTrial,
        state: TrialState,
        value: float | None,
        user_attrs: dict[str, Any],
        intermediate_values: dict[int, float],
        started: datetime.datetime,
    ) -> int:
        """Stores a new trial in ``state`` (finished, or RUNNING); returns its id.

        ``template`` carries the params and the sampler's system attrs from the replica.
        """
        write_id = uuid.uuid4().hex
        trial = optuna.trial.create_trial(
            state=state,
            value=value,
            params=template.params,
            distributions=template.distributions,
            user_attrs=user_attrs,
            system_attrs={**template.system_attrs, WRITE_ID_ATTR: write_id},
            intermediate_values=intermediate_values,
        )
        trial.datetime_start = started
        done: list[int] = []

        def check_first() -> None:
            # A commit whose acknowledgement was lost has taken effect: do not add it twice.
            found = self.writer.find(WRITE_ID_ATTR, write_id)
            if found is not None:
                done.append(found)

        def write() -> None:
            if not done:
                done.append(self.writer.add(trial))

        self.last_written = None
        self._call_with_check(write, check_first, f"writing a {state.name} trial")
        added = self.writer.last_added
        if added is not None and added[0] == done[0]:
            self.last_written = as_stored(trial, *added)
        return done[0]

    def write_many(
        self,
        members: Sequence[NewTrial],
        started: datetime.datetime,
    ) -> list[int]:
        """Stores new trials (a population's K) in one transaction; returns their ids, in order.

        Each carries its own write id; the transaction stores all of them or none, so one found
        after a lost acknowledgement means all were stored. RUNNING trials (a shared study's) get their
        first heartbeats in the same transaction.
        """
        write_ids = [uuid.uuid4().hex for _ in members]
        trials = []
        for member, write_id in zip(members, write_ids):
            trial = optuna.trial.create_trial(
                state=member.state,
                value=member.value,
                params=member.template.params,
                distributions=member.template.distributions,
                user_attrs=member.user_attrs,
                system_attrs={**member.template.system_attrs, WRITE_ID_ATTR: write_id},
                intermediate_values=member.intermediate_values,
            )
            trial.datetime_start = started
            trials.append(trial)
        done: list[list[int]] = []

        def check_first() -> None:
            # A commit whose acknowledgement was lost has taken effect, for every trial of it.
            if not done and self.writer.find(WRITE_ID_ATTR, write_ids[0]) is not None:
                found = [self.writer.find(WRITE_ID_ATTR, w) for w in write_ids]
                if all(tid is not None for tid in found):  # Always, on a database: one transaction.
                    done.append([tid for tid in found if tid is not None])

        def write() -> None:
            if not done:
                done.append(self.writer.add_many(trials))

        self.last_written_many = None
        states = sorted({m.state.name for m in members})
        self._call_with_check(write, check_first, f"writing {len(members)} {'/'.join(states)} trials")
        added = self.writer.last_added_many
        if added is not None and [trial_id for trial_id, _ in added] == done[0]:
            self.last_written_many = [as_stored(trial, *entry) for trial, entry in zip(trials, added)]
        return done[0]

    def finish_many(self, finishes: Sequence[Finish]) -> list[bool]:
        """Finishes many RUNNING trials in one transaction; per trial, False when a peer failed it first."""
        outcome: dict[int, bool] = {}

        def check() -> None:
            # After a lost acknowledgement: a trial finished in the state being written was finished
            # by that commit; in another state, by a peer (as for one trial, :meth:`finish`).
            for f in finishes:
                if trial_id_of(f.trial) not in outcome:
                    stored = storage_of(self.study).get_trial(trial_id_of(f.trial))
                    if stored.state.is_finished():
                        outcome[trial_id_of(f.trial)] = stored.state == f.state

        def call() -> None:
            pending = [f for f in finishes if trial_id_of(f.trial) not in outcome]
            if pending:
                for f, finished in zip(pending, self.writer.finish_many(pending)):
                    outcome[trial_id_of(f.trial)] = finished

        self._call_with_check(call, check, f"finishing {len(finishes)} trials")
        for f in finishes:
            if not outcome[trial_id_of(f.trial)]:
                _logger.warning(
                    "trial %d was failed by another worker (no heartbeat for too long); its retry runs it"
                    " again",
                    f.trial.number,
                )
        return [outcome[trial_id_of(f.trial)] for f in finishes]

    def finish(
        self,
        trial: Running,
        state: TrialState,
        value: float | None,
        attrs: dict,
        intermediate_values: dict[int, float] | None = None,
    ) -> bool:
        """Finishes a claimed or registered trial; False when a peer failed it first (it looked dead).

        ``trial``: the claimed trial, or this process's record of the trial it registered
        (:attr:`last_written`), which spares reading it back (see
        :data:`search.storage._trial_writer.Running`).
        """
        finished: list[bool] = []

        def check() -> None:
            stored = storage_of(self.study).get_trial(trial_id_of(trial))
            if stored.state.is_finished():
                finished.append(stored.state == state)

        def call() -> None:
            if not finished:
                self.writer.finish(trial, state, value, attrs, intermediate_values)

        try:
            self._call_with_check(call, check, f"finishing trial {trial.number}")
        except optuna.exceptions.UpdateFinishedTrialError:
            finished.append(False)
        if finished and not finished[0]:
            _logger.warning(
                "trial %d was failed by another worker (no heartbeat for too long); its retry runs it again",
                trial.number,
            )
            return False
        return True

    def requeue_baseline(self, trial: optuna.Trial) -> None:
        """Queues a failed baseline trial again (nothing for a trial that is not a baseline)."""
        # A failed baseline runs again, so every study ends with every baseline's row (seed-1 ... seed-5).
        tag = baseline_of(trial)
        if tag is None:
            return

        def requeue() -> None:
            stored = storage_of(self.study).get_trial(trial_id_of(trial))
            params = stored.system_attrs.get("fixed_params") or stored.params
            self.writer.enqueue_once([waiting_baseline(tag, params)], BASELINE)

        with_retry(requeue, what="re-queuing a baseline", budget=self.retry_budget)

    def _call_with_check(self, call: Callable[[], None], check: Callable[[], None], what: str) -> None:
        with_retry(call, what=what, budget=self.retry_budget, retrying=check)

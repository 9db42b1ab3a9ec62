"""Measuring the answer's line rounded, before a run stops (:mod:`search.results._answer_rounding`).

When a run has reached its N trials, the runner asks the answer the summary will give (the same
:func:`search.results.recommend` on the same trials: the COMPLETE ones of this device kind) for the
next rounding of its line that no trial has measured, and enqueues it, once across all workers
and hosts (:meth:`search.storage.TrialWriter.enqueue_once`, keyed by the rounding's source and
params). It runs like a baseline, unpruned: the line a user pastes is then a trial of the study,
and every number shown with it is that trial's own. Coarse to fine, each rounding is queued only
after the coarser ones were measured and did not qualify, so a study adds one to three trials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial, TrialState

from search.core import ROUNDING_OF, device_kind, waiting_rounding
from search.results import answer_form, recommend

if TYPE_CHECKING:
    from search.study._trial_loop import Runner

MAX_PER_RUN = (
    6  # Three roundings of one answer, twice over if the answer moves: a bound, never reached in practice.
)


def queue_rounding(runner: Runner, trials: list[FrozenTrial]) -> bool:
    """Enqueues the next unmeasured rounding of the answer's line; True when one was added."""
    if runner.roundings_queued >= MAX_PER_RUN or not answer_form(runner.settings.run.scaler).rounds_by_trial:
        return False
    kind = runner.training.device_label.split(":")[0].split(" ")[0]
    group = [t for t in trials if t.state == TrialState.COMPLETE and device_kind(t) == kind]
    answer = recommend(group, runner.settings.space, device_type=kind)
    # A change held back for want of evidence still has its line's roundings measured: they are evidence.
    if answer is None or (answer.verdict != "change" and answer.held_back is None) or answer.rounding is None:
        return False
    rounding = answer.rounding
    if rounding.pending is None:
        return False
    waiting = waiting_rounding(rounding.tag(answer.rounded_from), rounding.pending)
    writer = runner.recorder.writer
    added = runner.storage_call(lambda: writer.enqueue_once([waiting], ROUNDING_OF), "enqueuing a rounding")
    runner.roundings_queued += len(added)
    return bool(added)


def rounding_note(count: int) -> str:
    """What a run's headline adds for the roundings it trained past N (nothing for none)."""
    if not count:
        return ""
    return f"; {count} more trained the answer's line rounded"

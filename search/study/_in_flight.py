"""What the trial loop has in flight, and what became of it when a signal stopped the run.

The interrupt message says what storage holds for the trial (or population) in flight, read back:
a trial can finish between the signal and its handling, so "recorded as FAIL" is not a given.
"""

from __future__ import annotations

from dataclasses import dataclass

from optuna.storages import BaseStorage
from optuna.trial import TrialState


@dataclass
class InFlight:
    """The trial the loop is handling now; cleared at the start of each loop."""

    handling: bool = False  # A trial is being claimed, sampled, trained or recorded.
    trial_id: int | None = None  # Its storage id, once it has one.
    population: list[int] | None = None  # A population in flight: its storage ids, once stored.

    def what_became_of_it(self, storage: BaseStorage) -> str:
        """One clause for the interrupt message, from the trial's state as stored now."""
        if not self.handling:
            return "no trial was in flight"
        if self.population is not None:
            return self._what_became_of_the_population(storage)
        if self.trial_id is None:
            return "the trial in flight had not been stored yet; nothing of it was kept"
        try:  # One read, no retries: the user asked to stop.
            stored = storage.get_trial(self.trial_id)
        except Exception:
            return "the trial in flight was recorded, but its state could not be read back"
        if stored.state == TrialState.FAIL:
            return f"trial {stored.number}, in flight, was recorded as FAIL"
        if stored.state.is_finished():
            return f"trial {stored.number} finished {stored.state.name} before the signal was handled"
        return f"trial {stored.number} is still {stored.state.name} in storage"

    def _what_became_of_the_population(self, storage: BaseStorage) -> str:
        assert self.population is not None
        if not self.population:
            return "the population in flight had not been stored yet; nothing of it was kept"
        try:  # One read, no retries: the user asked to stop.
            stored = [storage.get_trial(trial_id) for trial_id in self.population]
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

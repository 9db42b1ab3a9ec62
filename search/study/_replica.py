"""An in-memory replica of the study, so that sampling a trial costs no storage call.

The sampler runs against an in-memory study that holds a copy of the stored study's finished
trials: ``replica.study.ask()`` samples the params from the history there (CMA-ES also keeps its
state in the trial's system attrs), and the pruner judges a sampled trial's reports there too.
The trial reaches storage only once it has trained, written whole from the replica's record
(:meth:`Replica.frozen`), params and sampler attrs included; the replica then drops its own
RUNNING copy (:meth:`Replica.discard`) and learns the stored one at the next :meth:`Replica.sync`.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.storage import trial_id_of


class Replica:
    """An in-memory copy of the study's finished trials that the sampler runs against.

    Args:
        sampler: The run's sampler; it samples every trial of the run here.
        pruner: The run's pruner (``NopPruner`` for none).
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner) -> None:
        self.study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
        self._seen: set[int] = set()

    def sync(self, trials: list[FrozenTrial]) -> None:
        """Adds the stored study's finished trials that the replica does not hold yet."""
        for t in trials:
            if t.state.is_finished() and trial_id_of(t) not in self._seen:
                self._seen.add(trial_id_of(t))
                self.study.add_trial(t)

    def frozen(self, trial: optuna.Trial) -> FrozenTrial:
        """The replica's record of ``trial``: params and the sampler's system attrs."""
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return next(t for t in running if t.number == trial.number)

    def discard(self, trial: optuna.Trial) -> None:
        """Ends the replica's copy of ``trial`` once it is stored."""
        # The real copy arrives with the next sync; samplers ignore FAIL trials.
        self.study.tell(trial, state=TrialState.FAIL)

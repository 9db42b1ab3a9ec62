"""An in-memory replica of the study, so that sampling a trial costs no storage call.

The sampler runs against an in-memory study that holds a copy of the stored study's finished
trials: ``replica.study.ask()`` samples the params from the history there (CMA-ES also keeps its
state in the trial's system attrs), and the pruner judges a sampled trial's reports there too.
The trial reaches storage only once it has trained, written whole from the replica's record
(:meth:`Replica.frozen`), params and sampler attrs included. The replica's own copy is then told the
state and value storage now holds (:meth:`Replica.settle`) and stands for the stored trial from then on,
so the replica holds each trial of the study once, and a trial costs the replica what is new in the
study, not the whole study again: a long study's bookkeeping stays flat per trial.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.storage import storage_of, trial_id_of


class Replica:
    """An in-memory copy of the study's finished trials that the sampler runs against.

    Args:
        sampler: The run's sampler; it samples every trial of the run here.
        pruner: The run's pruner (``NopPruner`` for none).
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner) -> None:
        self.study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
        self._seen: set[int] = set()  # Storage ids of the stored trials the replica holds (or stands for).
        self._settled = 0  # A prefix of the stored study that is finished and held: never read again.
        self._pruned_by_reports = not isinstance(pruner, optuna.pruners.NopPruner)

    def sync(self, trials: list[FrozenTrial]) -> None:
        """Adds the stored study's finished trials that the replica does not hold yet.

        ``trials`` is the stored study in number order. A finished trial stays as it is, so the
        leading run of finished trials already held is skipped at the next sync.
        """
        for index in range(self._settled, len(trials)):
            t = trials[index]
            if t.state.is_finished() and trial_id_of(t) not in self._seen:
                self._seen.add(trial_id_of(t))
                self.study.add_trial(t)
            if index == self._settled and t.state.is_finished():
                self._settled += 1

    def frozen(self, trial: optuna.Trial) -> FrozenTrial:
        """The replica's record of ``trial``: params and the sampler's system attrs."""
        return storage_of(self.study).get_trial(trial_id_of(trial))

    def settle(
        self,
        trial: optuna.Trial,
        state: TrialState,
        value: float | None,
        reports: dict[int, float],
        stored_id: int | None,
    ) -> None:
        """Ends the replica's copy of ``trial`` as storage holds it (trial ``stored_id`` there).

        Told the stored state, value and, where a pruner or the sampler reads them, intermediate values
        (``reports``), the copy stands for the stored trial, which :meth:`sync` then skips: samplers and
        pruners read a trial's params, values, reports and system attrs, all in the copy, and none of its
        user attrs. ``stored_id`` None (a peer failed the trial first): the copy is told FAIL, which
        samplers ignore, and the stored trial arrives with the next sync.
        """
        if stored_id is None or state == TrialState.FAIL:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            # Samplers read the reports of PRUNED trials only (TPE ranks them by their last one).
            if self._pruned_by_reports or state == TrialState.PRUNED:
                storage, trial_id = storage_of(self.study), trial_id_of(trial)
                for step, loss in reports.items():
                    storage.set_trial_intermediate_value(trial_id, step, loss)
            self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
        if stored_id is not None:
            self._seen.add(stored_id)

"""The trial loop's view of the study: what it skips reading must equal what a read returns."""

from __future__ import annotations

import optuna
import torch
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from search.core import DEFAULTS, with_run
from search.storage import enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.tasks.seed_mlp import build


def _runner(tmp_path, trials: int) -> Runner:
    settings = with_run(DEFAULTS, trials=trials, storage=f"sqlite:///{tmp_path}/study.db", epochs=5)
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    return Runner(handle.study, settings, problem, "cpu", torch.float16, sampler, None, steps=5)


def _as_read(t: optuna.trial.FrozenTrial) -> tuple:
    return (
        t._trial_id,
        t.number,
        t.state,
        t.values,
        t.params,
        t.distributions,
        t.user_attrs,
        t.system_attrs,
        t.intermediate_values,
        t.datetime_start,
        t.datetime_complete,
    )


def test_the_study_it_does_not_read_back_equals_what_a_read_returns(tmp_path, monkeypatch):
    """After its own write the loop does not read its trial back (issue 13: 4-5 ms a trial); every
    such view of the study must be exactly what reading the storage gives."""
    runner = _runner(tmp_path, 14)
    views: list[list[optuna.trial.FrozenTrial]] = []
    original = Runner._study_after_own_write

    def spy(self, before):
        known = original(self, before)
        if known is not None:
            views.append(known)
        return known

    monkeypatch.setattr(Runner, "_study_after_own_write", spy)
    runner.run()
    stored = {
        t.number: t
        for t in optuna.load_study(
            storage=runner.study._storage._backend, study_name=runner.study.study_name
        ).get_trials()
    }
    assert len(views) >= 8, "every sampled trial after the baselines should be known without a read"
    for view in views:
        assert [t.number for t in view] == list(range(len(view)))
        assert [_as_read(t) for t in view] == [_as_read(stored[t.number]) for t in view]


def test_a_trial_another_process_wrote_before_ours_is_read(tmp_path, monkeypatch):
    """Another writer's trial, stored between the loop's read and its write: the write's number
    shows it, so the loop reads, and the sampler sees that trial."""
    runner = _runner(tmp_path, 9)
    other = optuna.load_study(storage=f"sqlite:///{tmp_path}/study.db", study_name=runner.study.study_name)
    write = runner.recorder.write
    calls: list[int] = []

    def write_after_another(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # The second sampled trial: another process's trial goes first.
            other.add_trial(
                optuna.trial.create_trial(
                    params={"foreign": 0.5}, distributions={"foreign": FloatDistribution(0, 1)}, value=9.0
                )
            )
        return write(*args, **kwargs)

    known: list[object] = []
    original = Runner._study_after_own_write
    monkeypatch.setattr(runner.recorder, "write", write_after_another)
    monkeypatch.setattr(
        Runner,
        "_study_after_own_write",
        lambda self, before: known.append(original(self, before)) or known[-1],
    )
    runner.run()
    assert known[0] is not None and known[1] is None and known[2] is not None
    assert any(
        t.params.get("foreign") == 0.5 for t in runner.replica.study.get_trials(states=(TrialState.COMPLETE,))
    )

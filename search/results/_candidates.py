"""Which configurations a confirmation re-runs on new seeds: the top-k of a study, its recommendation, the
default.

A search ranks settings on one seed, so its winner may simply be lucky on that seed.
``python -m search.confirm`` re-runs the top-k configurations of a finished study (its k
lowest-objective COMPLETE trials, de-duplicated by params, baselines included), the search's
recommendation (:func:`search.results._recommendation.recommend`) when it is not the default itself, and
PyTorch's default GradScaler settings (the ``seed-1`` baseline, in the study's space: a fixed
parameter keeps its fixed value). This module chooses them from the finished trials; training them
is :mod:`search.confirmation._confirmation_runs`, reading the runs back :mod:`search.results._confirmations`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import BaseDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from search.core import (
    DEFAULT_BASELINE,
    POW2_NAME,
    SEED_BASELINES,
    Settings,
    baseline_of,
    distributions,
    holding,
)
from search.results._confirmations import DEFAULT_LABEL, default_label
from search.results._confirmations import config_key as _config_key
from search.results._recommendation import recommend
from search.results._rule_answer import answer_rule_study
from search.results._tolerance import DEFAULT_TOLERANCE
from search.scalers import RULES


@dataclass(frozen=True)
class Candidate:
    """One configuration to confirm.

    Attributes:
        label: ``best-<rank> (#<trial>)`` or :data:`DEFAULT_LABEL`.
        source_trial: The search trial it comes from; None for the default.
        params: Trial params in the study's space (fixed parameters are not params).
        distributions: The distributions its trials are stored with.
        baseline: The source trial's baseline tag (``seed-1`` ...), if it is one.
    """

    label: str
    source_trial: int | None
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution] = field(repr=False)
    baseline: str | None = None

    @property
    def key(self) -> str:
        """What identifies its runs in the sibling study, with the data seed."""
        return _config_key(self.source_trial, self.params)


def top_candidates(
    trials: Sequence[FrozenTrial],
    settings: Settings,
    top: int,
    tolerance: float,
    recommended_of: Callable[[Sequence[FrozenTrial], Settings, float], Candidate | None],
    default_of: Callable[[Settings], tuple[Candidate, str | None]],
) -> tuple[list[Candidate], list[str]]:
    """The top-``top`` configurations of a study, its recommendation and the default, with notes for the user.

    ``recommended_of`` and ``default_of`` give the answer and the default in the rule's form
    (:func:`recommended_candidate` and :func:`default_candidate` for GradScaler; under a framework's rule,
    :func:`rule_recommended_candidate` and :func:`rule_default_candidate`). The top-k are the
    lowest-objective COMPLETE trials (ties: the earlier trial first), one per distinct params; baselines are
    not excluded, so ``best-1`` may be a baseline, even the default's own settings.
    """
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    ranked = sorted(complete, key=lambda t: (t.value, t.number))
    chosen: list[Candidate] = []
    seen: set[str] = set()
    for trial in ranked:
        key = _config_key(None, trial.params)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(
            Candidate(
                label=f"best-{len(chosen) + 1} (#{trial.number})",
                source_trial=trial.number,
                params=dict(trial.params),
                distributions=dict(trial.distributions),
                baseline=baseline_of(trial),
            )
        )
        if len(chosen) == top:
            break
    notes = []
    if len(chosen) < top:
        notes.append(f"only {len(chosen)} distinct complete configuration(s) in the study; --top {top} asked")
    recommended = recommended_of(trials, settings, tolerance)
    default, note = default_of(settings)
    if recommended is not None and all(
        _config_key(None, recommended.params) != _config_key(None, c.params) for c in chosen
    ):
        chosen.append(recommended)
    if note:
        notes.append(note)
    return chosen + [default], notes


def recommended_candidate(
    trials: Sequence[FrozenTrial], settings: Settings, tolerance: float = DEFAULT_TOLERANCE
) -> Candidate | None:
    """The search's recommendation (:func:`search.results._recommendation.recommend`) as a candidate, unless
    it is the default."""
    rec = recommend(trials, settings.space, tolerance)
    if rec is None or (rec.keep_default and rec.held_back is None):
        return None
    config = rec.held_back or rec.config  # A change held back for want of evidence: confirm settles it.
    params: dict[str, Any] = {}
    for name, dist in distributions(settings.space).items():
        value: Any = math.log2(config.init_scale) if name == POW2_NAME else getattr(config, name)
        params[name] = int(round(value)) if isinstance(dist, IntDistribution) else float(value)
    return Candidate(
        f"recommended (#{rec.source_trial})",
        rec.source_trial,
        params,
        dict(distributions(settings.space)),
    )


def default_candidate(settings: Settings) -> tuple[Candidate, str | None]:
    """PyTorch's default settings (the ``seed-1`` baseline) as params of the study's space.

    A parameter the space fixes keeps its fixed value (it is not a param). A default value outside
    a searched range is still run; its stored distribution is widened to contain it, with a note.
    """
    _tag, cfg = SEED_BASELINES[0]
    dists = distributions(settings.space)
    values = {name: math.log2(cfg.init_scale) if name == POW2_NAME else getattr(cfg, name) for name in dists}
    params, dists, outside = _in_space(values, dists)
    note = None
    if outside:
        note = (
            f"the default's {', '.join(outside)} lies outside the study's search space; "
            "it is run all the same"
        )
    return Candidate(DEFAULT_LABEL, None, params, dists, DEFAULT_BASELINE), note


def rule_recommended_candidate(
    trials: Sequence[FrozenTrial], settings: Settings, tolerance: float = DEFAULT_TOLERANCE
) -> Candidate | None:
    """A framework study's answer (:func:`search.results._rule_answer.answer_rule_study`) as a candidate,
    when it is a change: the values it prints, minimal change and rounding included, not its trial's."""
    answer = answer_rule_study(list(trials), settings.space, settings.run.scaler, tolerance)
    if answer is None or (answer.verdict != "change" and answer.held_back is None):
        return None
    values = answer.held_back or answer.values  # A change held back for want of evidence: confirm settles it.
    params, dists, _outside = _in_space(values, distributions(settings.space, settings.run.scaler))
    return Candidate(f"recommended (#{answer.source_trial})", answer.source_trial, params, dists)


def rule_default_candidate(settings: Settings) -> tuple[Candidate, str | None]:
    """The framework's default (its first baseline) as params of the study's space; as
    :func:`default_candidate`, a default outside a searched range is run all the same, with a note."""
    rule = RULES[settings.run.scaler]
    params, dists, outside = _in_space(rule.default, distributions(settings.space, rule.name))
    note = None
    if outside:
        note = (
            f"{rule.title}'s default {', '.join(outside)} lies outside the study's search space; it is run"
            " all the same"
        )
    return Candidate(default_label(rule.name), None, params, dists, rule.default_tag), note


def _in_space(
    values: Mapping[str, Any], dists: Mapping[str, BaseDistribution]
) -> tuple[dict[str, Any], dict[str, BaseDistribution], list[str]]:
    """Each searched parameter's value as a param (an int where its distribution is; a flag as 0/1), its
    distribution widened to hold it, and the parameters that lay outside. A fixed one is no param: the runs
    take its fixed value, as the study's trials did."""
    params: dict[str, Any] = {
        name: int(values[name]) if isinstance(dist, IntDistribution) else float(values[name])
        for name, dist in dists.items()
    }
    outside = [name for name, dist in dists.items() if not dist.low <= params[name] <= dist.high]
    return params, holding(params, dists), outside

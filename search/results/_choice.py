"""The search's own choice of an answer, the same for every rule: the default when it is deep, else the
deepest supported good trial.

On the landscape of a study (:mod:`search.results._landscape`), the rule's default (its first baseline:
PyTorch's ``seed-1``, ``deepspeed-default``, ...) is kept when it is good, at least :data:`DEFAULT_MARGIN`
deep, and judged on the trials around it (:data:`~search.results._landscape.MIN_SUPPORT` good trials within
its depth), as any answer is. Otherwise the choice is the deepest good trial among those with that support
(any good trial when none has it), ties broken by the lower objective, then the lower number. What follows
the choice (the minimal change, rounding, confirmation runs) can still turn a change back to the default.

A change is an answer only where the study's own evidence separates it from the default (:func:`unseparated`):
where the default ran and ended in no failure code, with no other trial that is not good within
:data:`DEFAULT_MARGIN` of it, a change whose region holds fewer than :data:`MIN_SUPPORT` good trials (one
lucky point), whose region's own objectives reach the default's (a tie within the spread the study measured
there), or whose evaluation a few records decide (:mod:`search.results._dominance`) is held back: the default
is kept, the change is named, and ``search.confirm`` trains both on new seeds, which settle it.
"""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import FrozenTrial

from search.core import failure_of
from search.results._dominance import dominance_note, judged_evaluation
from search.results._landscape import MIN_SUPPORT, Landscape, depth_of

DEFAULT_MARGIN = 2.0  # Keep the default when it is good and this deep (octaves) from the nearest bad trial.


@dataclass(frozen=True)
class Choice:
    """The search's own answer, before the minimal change and confirmation runs.

    Attributes:
        deepest: The deepest supported good trial (any good one when none is supported).
        source: The default's trial when keeping it, else ``deepest``.
        default_depth: The default's depth; None when it is not good or has not run.
        keep_default: Whether the default is kept.
    """

    deepest: FrozenTrial
    source: FrozenTrial
    default_depth: float | None
    keep_default: bool


def choose(landscape: Landscape, default: FrozenTrial | None) -> Choice:
    """The choice on ``landscape`` (module docstring); ``default`` is the default's trial, if it ran.

    ``landscape`` must hold a good trial.
    """
    good = landscape.good
    supported = [t for t in good if len(landscape.support(t.number)) >= MIN_SUPPORT]
    deepest = max(supported or good, key=lambda t: (landscape.depth(t.number), -t.value, -t.number))
    default_depth = (
        landscape.depth(default.number)
        if default is not None and default.number in landscape.good_ids
        else None
    )
    keep_default = (
        default is not None
        and default_depth is not None
        and default_depth >= DEFAULT_MARGIN
        and len(landscape.support(default.number)) >= MIN_SUPPORT
    )
    source = default if keep_default and default is not None else deepest
    return Choice(deepest=deepest, source=source, default_depth=default_depth, keep_default=keep_default)


def unseparated(landscape: Landscape, candidate: FrozenTrial, default: FrozenTrial | None) -> str:
    """Why the study cannot separate ``candidate``, a change, from ``default`` (module docstring), as a
    sentence; "" where it can (or the default did not run, or failed, or a failure lies near it)."""
    if default is None or candidate.number == default.number or failure_of(default) != "none":
        return ""
    others = [(n, where) for n, where in landscape.bad if n != default.number]
    near, _nearest = depth_of(landscape.where[default.number], others)
    if near < DEFAULT_MARGIN:  # A trial that is not good beside the default: moving away is the evidence.
        return ""
    # The candidate and the good trials around it, the default left out: the spread measured without it.
    region = [candidate.number]
    region += [n for n in landscape.support(candidate.number) if n not in (candidate.number, default.number)]
    objectives = {t.number: t.value for t in landscape.done if t.number in region}
    ours = f"trial #{candidate.number} (objective {candidate.value:.4g})"
    theirs = f"the default's trial #{default.number} (objective {default.value:.4g}, no failure code)"
    if len(region) < MIN_SUPPORT:
        why = (
            f"{ours} has {len(region) - 1} other good trial{'' if len(region) == 2 else 's'} in its region,"
            f" fewer than the {MIN_SUPPORT - 1} that would show it is not one lucky point"
        )
    elif default.value <= max(objectives.values()):
        why = (
            f"{ours} and the good trials of its region reach {max(objectives.values()):.4g}, as far as"
            " the default: a tie within the spread this study measured there"
        )
    else:
        few = dominance_note(candidate, judged_evaluation(candidate))
        if not few:
            return ""
        why = f"{ours}: {few}"
    return (
        f"Not a change yet: {why}, so this study cannot separate it from {theirs}; keep the default, and"
        " python -m search.confirm trains both on new seeds, which settle it."
    )

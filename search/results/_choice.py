"""The search's own choice of an answer, the same for every rule: the default when it is deep, else the
deepest supported good trial.

On the landscape of a study (:mod:`search.results._landscape`), the rule's default (its first baseline:
PyTorch's ``seed-1``, ``deepspeed-default``, ...) is kept when it is good, at least :data:`DEFAULT_MARGIN`
deep, and judged on the trials around it (:data:`~search.results._landscape.MIN_SUPPORT` good trials within
its depth), as any answer is. Otherwise the choice is the deepest good trial among those with that support
(any good trial when none has it), ties broken by the lower objective, then the lower number. What follows
the choice (the minimal change, rounding, confirmation runs) can still turn a change back to the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import FrozenTrial

from search.results._landscape import MIN_SUPPORT, Landscape

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

"""What confirmation runs on new seeds say of a setting against the default (PyTorch's, or a framework's).

A search ranks settings on the seeds it trained; ``search.confirm`` re-runs a setting and the
default on new seeds and pairs them (:mod:`search.results._confirmations`). Its verdict decides
the recommendation: a default significantly better overturns it, and a setting not significantly
better than a good default is not worth a change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def confirmation_verdict(
    confirmation: dict[str, Any], matches: Callable[[dict[str, Any]], bool]
) -> tuple[str, str] | None:
    """What confirmation runs say of a setting against the default, or None if they did not run it.

    Args:
        confirmation: :func:`search.results._confirmations.summarize_confirmation` data.
        matches: Whether a comparison's ``params`` are the setting (under any rule).

    Returns:
        ``(verdict, sentence)``: ``"confirmed"`` (significantly better than the default on new
        seeds), ``"overturned"`` (the default significantly better) or ``"not better"``.
    """
    entry = next((c for c in confirmation.get("comparisons", []) if matches(c["params"])), None)
    return comparison_verdict(entry)


def comparison_verdict(entry: dict[str, Any] | None) -> tuple[str, str] | None:
    """What one entry of a confirmation's ``comparisons`` says against the default (as
    :func:`confirmation_verdict`), under any rule; None without an entry or a test."""
    if entry is None or entry.get("p") is None:
        return None
    diff, sd, n, p = entry["mean_diff"], entry.get("sd_diff"), entry["n"], entry["p"]
    spread = entry.get("default_sd")
    stats = (
        (
            f"mean difference {diff:+.4g} (recommended minus default) over {n} new seeds, sd of the "
            f"difference {sd:#.3g}"
            + (f", seed-to-seed sd of the default {spread:#.3g}" if spread is not None else "")
            + f", two-sided paired t-test p = {p:.3g}"
        )
        if sd is not None
        else f"mean difference {diff:+.4g} over {n} seeds, p = {p:.3g}"
    )
    if entry.get("significant") and diff < 0:
        return "confirmed", f"Confirmed on new seeds: it is significantly better than the default ({stats})."
    if entry.get("significant") and diff > 0:
        return (
            "overturned",
            f"Overturned on new seeds: the default is significantly better ({stats}), so keep the default.",
        )
    return (
        "not better",
        f"On new seeds it is not significantly different from the default ({stats}): not worth a change.",
    )


def weigh_confirmation(
    confirmation: dict[str, Any], matches: Callable[[dict[str, Any]], bool]
) -> tuple[str | None, bool, list[str], int | None]:
    """(verdict, whether to turn to the default, sentences, new seeds paired) from confirmation runs of the
    setting ``matches`` picks among their comparisons (:func:`confirmation_verdict`), under any rule.

    An overturned setting gives way to the default, and so does one that new seeds do not find
    better beyond noise: a change is worth making only when it measurably helps.
    """
    verdict = confirmation_verdict(confirmation, matches)
    if verdict is None:
        return None, False, [], None
    entry = next(c for c in confirmation["comparisons"] if matches(c["params"]))
    confirmed, sentence = verdict
    if confirmed == "overturned":
        return confirmed, True, [sentence], entry["n"]
    if confirmed == "not better":
        return confirmed, True, [sentence, "Keep the default."], entry["n"]
    return confirmed, False, [sentence], entry["n"]

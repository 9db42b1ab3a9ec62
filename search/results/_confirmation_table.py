"""The table ``python -m search.confirm`` prints: each configuration's runs on the new seeds, and the paired
test.

Under ``--scaler torch`` a configuration is shown by GradScaler's four settings; under a framework's rule,
by that framework's knobs, under its own names.
"""

from __future__ import annotations

import math

from search.core import Settings, setting_of
from search.results._confirmations import ALPHA, ConfigRuns, is_default, mean_sd, paired_comparison
from search.scalers import RULES


def _pm(mean: float, sd: float, fmt: str = ".4f") -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:{fmt}} ± {sd:{fmt}}" if math.isfinite(sd) else f"{mean:{fmt}}"


def format_confirmation(
    seeds: list[int], stats: list[ConfigRuns], settings: Settings, baselines: dict[int, str] | None = None
) -> str:
    """The table of a confirmation and its verdict, as printed by the command."""
    baselines = baselines or {}
    scaler = settings.run.scaler
    names, widths = _setting_columns(scaler)
    label_width = max([len("config")] + [len(s.candidate["label"]) for s in stats])
    source_width = max([12] + [len(_source(s, baselines)) for s in stats])
    header = (
        f"  {'config':<{label_width}} {'source':>{source_width}} "
        + " ".join(f"{n:>{w}}" for n, w in zip(names, widths))
        + f" {'n':>3} {'score mean ± sd':>21} {'evaluation mean ± sd':>21}"
    )
    lines = [header]
    for s in stats:
        values = [s.values[x] for x in seeds if x in s.values]
        losses = [s.final_losses[x] for x in seeds if x in s.final_losses]
        finite_losses = [v for v in losses if v is not None]
        loss_text = _pm(*mean_sd(finite_losses))
        if len(finite_losses) < len(losses):
            loss_text += f" ({len(losses) - len(finite_losses)} nan)"
        cells = _setting_cells(s.candidate["params"], settings)
        lines.append(
            f"  {s.candidate['label']:<{label_width}} {_source(s, baselines):>{source_width}} "
            + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths))
            + f" {len(values):>3} {_pm(*mean_sd(values)):>21} {loss_text:>21}"
        )
    lines.append("")
    lines.extend(_verdict(seeds, stats))
    return "\n".join(lines)


def _source(s: ConfigRuns, baselines: dict[int, str]) -> str:
    trial = s.candidate["source_trial"]
    return "-" if trial is None else f"#{trial}" + (f" {baselines[trial]}" if trial in baselines else "")


def _setting_columns(scaler: str) -> tuple[list[str], list[int]]:
    """The setting's column names and widths: every knob of the study's rule."""
    names = [knob.label or knob.name for knob in RULES[scaler].knobs]
    return names, [max(len(n), 7) for n in names]


def _setting_cells(params: dict, settings: Settings) -> list[str]:
    # As each knob's table writes it: these are the values the runs used.
    setting = setting_of(params, settings.space, settings.run.scaler)
    return [knob.cell(setting.values[knob.name]) for knob in RULES[settings.run.scaler].knobs]


def _verdict(seeds: list[int], stats: list[ConfigRuns]) -> list[str]:
    lines = _verdict_of(seeds, stats, "best-1 ")
    recommended = next((s for s in stats if s.candidate["label"].startswith("recommended ")), None)
    if recommended is not None:
        lines += _verdict_of(seeds, stats, "recommended ")
    return lines


def _verdict_of(seeds: list[int], stats: list[ConfigRuns], label: str) -> list[str]:
    paired = paired_comparison(seeds, stats, label)
    if paired is None:
        return [f"  paired test: nothing to compare ({label.strip()} or the default is missing)"]
    c = paired.comparison
    best, mean_diff, p, t = c["best_label"], c["mean_diff"], c["p"], c["t"]
    lines = []
    if paired.same_settings:
        lines.append(
            f"  note: {best} has the default's own settings: no trial of the search beat the default "
            "on its seed (ties go to the earliest trial)"
        )
    if mean_diff is None or paired.n < 2:
        return lines + [f"  paired test: not enough paired seeds yet ({paired.n}; a paired test needs 2)"]
    default = next(s for s in stats if is_default(s.candidate["label"]))
    _, spread = mean_sd([default.values[x] for x in seeds if x in default.values])
    sd_text = f" ± {paired.sd_diff:#.3g} (sd)" if paired.sd_diff is not None else ""
    spread_text = f"; the default's seed-to-seed sd is {spread:#.3g}" if math.isfinite(spread) else ""
    lines.append(
        f"  {best} minus the default, paired by seed: mean {mean_diff:+.4g}{sd_text} over {paired.n} seeds"
        + spread_text
    )
    t_text = f"t = {t:.2f}, " if t is not None else ""
    if paired.tie:
        lines.append(
            f"  paired test: {best} and the default tie on every seed "
            "(identical objective; no test needed, p = 1)"
        )
    elif c["better_beyond_noise"]:
        lines.append(
            f"  paired test: {best} is better than the default beyond noise "
            f"({t_text}p={p:.3g} < {ALPHA:g}, two-sided paired t-test)"
        )
    elif c["worse_beyond_noise"]:
        lines.append(
            f"  paired test: the default is better than {best} beyond noise "
            f"({t_text}p={p:.3g} < {ALPHA:g}, two-sided paired t-test): keep the default"
        )
    else:
        p_text = f"p={p:.3g}" if p is not None else "p undefined"
        lines.append(
            f"  paired test: {best} is not distinguishable from the default "
            f"({t_text}{p_text}, two-sided paired t-test)"
        )
    return lines

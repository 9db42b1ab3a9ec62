"""The advice's "start at ..." in every rule's own terms, and the flags it prints set what it says: read back
by the commands' own flag parser, they give the advised starting scale."""

from __future__ import annotations

import re
import shlex

import pytest

from search.cli._knob_flags import setting_from_flags
from search.diagnosis._advice import check_flags, start_advice
from search.scalers import RULES

GRADSCALER_FLAGS = ("--init-scale", "--growth-factor", "--backoff-factor", "--growth-interval")


def _parsed(scaler: str, flags: str):
    """The setting ``search.diagnose`` builds from the printed flags."""
    words = shlex.split(flags)
    given = {flag: None for flag in GRADSCALER_FLAGS}
    knobs = []
    for flag, value in zip(words[::2], words[1::2]):
        if flag == "--knob":
            knobs.append(value)
        else:
            given[flag] = float(value)
    return setting_from_flags(scaler, given, knobs)


@pytest.mark.parametrize("scaler", sorted(RULES))
def test_the_advised_start_is_what_its_flags_set(scaler):
    rule = RULES[scaler]
    user = rule.setting({**rule.default, rule.window_knob: 7})  # a setting off the default: kept in the check
    scale = 2.0**11 if rule.knob(rule.start_knob).octaves else 1234.0  # not a power of two
    advice = start_advice(user, scale)
    assert advice.startswith(f"start at {rule.start_knob} ")
    flags = re.search(r"rerun this diagnosis with (.*) for its own diagnosis", advice).group(1)
    assert flags == check_flags(rule.setting({**user.values, rule.start_knob: rule.start_value(scale)}))
    parsed = _parsed(scaler, flags)
    assert rule.start_scale(parsed.values) == scale
    assert parsed.values[rule.window_knob] == 7

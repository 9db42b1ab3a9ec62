"""Loading settings: the built-in defaults, then a TOML file, then the command's flags, each value checked.

A config file may name any subset of the keys; unknown keys and bad values are errors
(:class:`~search.core._settings.ConfigError`), raised here or by :mod:`search.core._validation`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, fields
from typing import Any

from search.core._settings import (
    DEFAULTS,
    ConfigError,
    ParamRange,
    PenaltyConfig,
    RunConfig,
    Settings,
    SpaceConfig,
    rule_ranges,
)
from search.core._validation import validate
from search.scalers import FRAMEWORKS, RULES

_PARAM_KEYS = {f.name for f in fields(ParamRange)}


def load_settings(path: str | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Builds validated settings: defaults, then the TOML file, then ``overrides``.

    Args:
        path: A TOML config file, or None for the built-in defaults.
        overrides: ``RunConfig`` field values (from command-line flags) that win over the file.

    Raises:
        ConfigError: On an unreadable or malformed file, an unknown key or a bad value.
    """
    data = DEFAULTS.to_dict()
    if path is not None:
        try:
            with open(path, "rb") as f:
                user = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"cannot read config {path}: {e.strerror}")
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"malformed TOML in {path}: {e}")
        except UnicodeDecodeError as e:
            raise ConfigError(f"config {path} is not UTF-8 text (byte {e.start}: {e.reason})")
        space = user.get("space")
        for where, spec in _space_tables(space if isinstance(space, dict) else {}):
            searched = sorted(k for k in ("low", "high", "log", "powers_of_two") if k in spec)
            if searched and "fixed" in spec:
                raise ConfigError(
                    f"[space.{where}] sets fixed and {', '.join(searched)}: a fixed setting is not searched,"
                    " keep one"
                )
        _unfix_searched(data["space"], space)
        _merge(data, user, path="")
    for key, value in (overrides or {}).items():
        if value is not None:
            data["run"][key] = value
    settings = Settings(
        run=_build(RunConfig, data["run"], "run"),
        space=_space_of(data["space"]),
        penalty=_build(PenaltyConfig, data["penalty"], "penalty"),
    )
    validate(settings)
    return settings


def _unfix_searched(defaults: dict[str, Any], space: Any) -> None:
    """A knob fixed by default (fairseq's threshold_loss_scale) that ``space`` gives low/high/log is searched:
    its default ``fixed`` is dropped before the merge, or it would silently win."""
    for rule in FRAMEWORKS:
        tables = space.get(rule) if isinstance(space, dict) else None
        for knob, table in tables.items() if isinstance(tables, dict) else ():
            default = defaults[rule].get(knob)
            if isinstance(table, dict) and isinstance(default, dict) and {"low", "high", "log"} & set(table):
                default.pop("fixed", None)


def _knob_range(rule: str, knob: str, spec: dict[str, Any]) -> ParamRange:
    """A framework knob's range; a knob fixed by default is written without low/high/log, taken from the knob.
    """
    where = f"space.{rule}.{knob}"
    if knob not in rule_ranges(rule):
        raise ConfigError(
            f"unknown config key [{where}]: {RULES[rule].title}'s knobs are {', '.join(rule_ranges(rule))}"
        )
    default = asdict(rule_ranges(rule)[knob])
    merged = {key: default[key] for key in ("low", "high", "log")} | spec
    if "fixed" not in spec and default["fixed"] is not None and {"low", "high"} - set(spec):
        merged["fixed"] = default["fixed"]
    return _build(ParamRange, merged, where)


def _space_tables(space: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(where, table)`` of every parameter table of a ``[space]``: ``init_scale``, ``deepspeed.hysteresis``.
    """
    tables = []
    for name, spec in space.items():
        if name in FRAMEWORKS and isinstance(spec, dict):
            tables += [(f"{name}.{knob}", table) for knob, table in spec.items() if isinstance(table, dict)]
        elif isinstance(spec, dict):
            tables.append((name, spec))
    return tables


def _space_of(data: dict[str, Any]) -> SpaceConfig:
    torch_ranges = {n: _build(ParamRange, s, f"space.{n}") for n, s in data.items() if n not in FRAMEWORKS}
    rule_ranges = {
        rule: {knob: _knob_range(rule, knob, spec) for knob, spec in data[rule].items()}
        for rule in FRAMEWORKS
        if rule in data
    }
    return SpaceConfig(**torch_ranges, **rule_ranges)


def settings_from_dict(data: dict[str, Any]) -> Settings:
    """Rebuilds settings from :meth:`Settings.to_dict` output (as stored in a study)."""
    merged = DEFAULTS.to_dict()
    _unfix_searched(merged["space"], data.get("space"))
    _merge(merged, data, path="")
    return Settings(
        run=_build(RunConfig, merged["run"], "run"),
        space=_space_of(merged["space"]),
        penalty=_build(PenaltyConfig, merged["penalty"], "penalty"),
    )


def _merge(base: dict[str, Any], user: dict[str, Any], path: str) -> None:
    for key, value in user.items():
        where = f"{path}.{key}" if path else key
        if key not in base and not (
            path.startswith("space.") and key in _PARAM_KEYS and path.count(".") <= 2
        ):
            raise ConfigError(f"unknown config key [{where}]")
        if isinstance(base.get(key), dict):
            if not isinstance(value, dict):
                raise ConfigError(f"[{where}] must be a table")
            _merge(base[key], value, where)
        else:
            base[key] = value


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    kwargs = {}
    for spec in fields(cls):
        if spec.name not in values:
            continue
        value = values[spec.name]
        kind = spec.type.split(" | ")[0] if isinstance(spec.type, str) else spec.type
        kwargs[spec.name] = _coerce(value, kind, f"{where}.{spec.name}")
    return cls(**kwargs)


def _coerce(value: Any, kind: str, where: str) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"[{where}] must be true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"[{where}] must be an integer, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"[{where}] must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"[{where}] must be finite, got {value!r}")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"[{where}] must be a string, got {value!r}")
        return value
    raise AssertionError(kind)

"""Validation of settings: each value against what the service and each scaler accept (:class:`ConfigError`).
"""

from __future__ import annotations

import math
import re

from search.core._settings import ConfigError, ParamRange, Settings, SpaceConfig
from search.scalers import RULES, SCALERS

SAMPLERS = ("tpe", "gp", "cmaes", "random")
PRUNERS = ("none", "median", "hyperband")
EVALUATIONS = ("mean", "median")
AMP_DTYPES = ("float16", "bfloat16")
# K models, their optimizer states and K x batch activations live on the device at once; beyond
# this a population stops paying (a GPU is full long before) and a typo (--population 100000) is
# more likely than an intent.
MAX_POPULATION = 4096
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
_DEVICES_RE = re.compile(r"^\d+(,\d+)*$")


# Optuna's schema holds study names of up to 512 characters; search.confirm's sibling study adds
# ".confirm" (search.results._confirmations.SUFFIX), so a search study's name must leave room for it.
MAX_STUDY_NAME = 512 - len(".confirm")


def validate(s: Settings) -> None:
    """Raises :class:`ConfigError` on the first value the service or the chosen scaler cannot take."""
    run = s.run
    if len(s.study_name) > MAX_STUDY_NAME:
        raise ConfigError(
            f"study name is {len(s.study_name)} characters; at most {MAX_STUDY_NAME} fit (Optuna's storage "
            "holds 512, and search.confirm's sibling study adds '.confirm')"
        )
    if run.trials < 0:
        raise ConfigError(f"trials must be >= 0, got {run.trials}")
    if run.epochs < 0:
        raise ConfigError(f"epochs must be >= 1 (or 0 for the task's default), got {run.epochs}")
    if run.seed < 0:
        raise ConfigError(f"seed must be >= 0, got {run.seed}")
    if run.steps < 0:
        raise ConfigError(f"steps must be >= 1 (or 0: as many as the epochs make), got {run.steps}")
    if run.steps and run.epochs:
        raise ConfigError(
            f"steps ({run.steps}) and epochs ({run.epochs}) both set: steps replaces epochs, give one of them"
        )
    if run.heartbeat_interval < 1:
        raise ConfigError(f"heartbeat_interval must be >= 1 second, got {run.heartbeat_interval}")
    if run.workers < 1:
        raise ConfigError(f"workers must be >= 1, got {run.workers}")
    if not run.batch_memory > 0:
        raise ConfigError(f"batch_memory must be > 0 MiB, got {run.batch_memory}")
    if not 1 <= run.population <= MAX_POPULATION:
        raise ConfigError(f"population must be between 1 and {MAX_POPULATION}, got {run.population}")
    if run.threads < 0:
        raise ConfigError(f"threads must be >= 0 (0: automatic), got {run.threads}")
    if run.devices and not _DEVICES_RE.match(run.devices):
        raise ConfigError(f"devices must be CUDA indices like 0,1,2; got {run.devices!r}")
    if run.storage_retry < 0:
        raise ConfigError(f"storage_retry must be >= 0 seconds, got {run.storage_retry}")
    if run.max_failed_trials < 1:
        raise ConfigError(f"max_failed_trials must be >= 1, got {run.max_failed_trials}")
    for name in ("timeout", "trial_timeout"):
        if getattr(run, name) < 0:
            raise ConfigError(f"{name} must be >= 0 (0 = no limit), got {getattr(run, name)}")
    if run.sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {run.sampler!r}: use one of {', '.join(SAMPLERS)}")
    if run.pruner not in PRUNERS:
        raise ConfigError(f"unknown pruner {run.pruner!r}: use one of {', '.join(PRUNERS)}")
    if run.amp_dtype not in AMP_DTYPES:
        raise ConfigError(f"unknown amp_dtype {run.amp_dtype!r}: use float16 or bfloat16")
    if not _DEVICE_RE.match(run.device):
        raise ConfigError(f"unknown device {run.device!r}: use auto, cpu, cuda or cuda:N")
    if not run.task:
        raise ConfigError("task must not be empty")
    if run.scaler not in SCALERS:
        raise ConfigError(f"unknown scaler {run.scaler!r}: use one of {', '.join(SCALERS)}")
    rule = RULES[run.scaler]
    if run.amp_dtype not in rule.amp_dtypes:
        raise ConfigError(
            f"--scaler {run.scaler} scales fp16 only ({rule.title} does not scale {run.amp_dtype}): "
            "use --amp-dtype float16"
        )
    if not rule.population and run.population > 1:
        raise ConfigError(
            f"population mode trains GradScaler's rule only: --scaler {run.scaler} runs one trial at a time "
            "(leave --population at 1)"
        )
    _validate_rule_space(s.space)

    pen = s.penalty
    if pen.evaluation not in EVALUATIONS:
        raise ConfigError(
            f"unknown [penalty] evaluation {pen.evaluation!r}: use one of {', '.join(EVALUATIONS)}"
        )
    for name in ("nonfinite", "silent", "skip"):
        if getattr(pen, name) < 0:
            raise ConfigError(f"[penalty] {name} must be >= 0, got {getattr(pen, name):g}")
    for name in ("learn_threshold", "churn_threshold", "underflow_threshold"):
        if not 0 < getattr(pen, name) <= 1:
            raise ConfigError(f"[penalty] {name} must be in (0, 1], got {getattr(pen, name):g}")


def _validate_rule_space(space: SpaceConfig) -> None:
    """Each knob's range (or fixed value) against what its rule accepts."""
    for rule in RULES.values():
        ranges = space.ranges(rule.name)
        for knob in rule.knobs:
            p = ranges[knob.name]
            where = f"[space.{rule.space_table}.{knob.name}]" if rule.space_table else f"[space.{knob.name}]"
            if p.powers_of_two and not knob.powers_of_two:
                raise ConfigError(f"{where} powers_of_two applies to [space.init_scale] only")
            values = [("fixed", p.fixed)] if p.fixed is not None else [("low", p.low), ("high", p.high)]
            for bound, value in values:
                if not knob.valid(value):
                    raise ConfigError(f"{where} {bound} must be {knob.rule}, got {value:g}")
            if p.fixed is None and p.low > p.high:
                raise ConfigError(f"{where} low ({p.low:g}) must not exceed high ({p.high:g})")
            if p.fixed is None and p.log and p.low <= 0:
                raise ConfigError(f"{where} low must be > 0 on a log scale, got {p.low:g}")
            if (
                p.fixed is None
                and p.powers_of_two
                and math.floor(math.log2(p.high)) < math.ceil(math.log2(p.low))
            ):
                raise ConfigError(f"{where} contains no power of two")
    megatron = space.ranges("megatron")
    lowest_initial = _lowest(megatron["initial_loss_scale"])
    if _highest(megatron["min_loss_scale"]) > lowest_initial:  # DynamicGradScaler asserts it.
        raise ConfigError(
            f"[space.megatron.min_loss_scale] reaches {_highest(megatron['min_loss_scale']):g}, above the"
            f" lowest initial_loss_scale {lowest_initial:g}: Megatron-LM requires min_loss_scale <="
            " initial_loss_scale"
        )


def _lowest(p: ParamRange) -> float:
    return p.fixed if p.fixed is not None else p.low


def _highest(p: ParamRange) -> float:
    return p.fixed if p.fixed is not None else p.high

"""Settings: the built-in defaults (defined here, once), TOML loading and validation.

``configs/default.toml`` mirrors :data:`DEFAULTS` exactly; a test checks it. A config file may
name any subset of the keys; unknown keys and bad values are errors (:class:`ConfigError`).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


class ConfigError(ValueError):
    """A malformed config file, an unknown key or an impossible value."""


@dataclass(frozen=True)
class ParamRange:
    """How one GradScaler setting is searched, or the value it is fixed at.

    Attributes:
        low: Lower bound (inclusive).
        high: Upper bound (inclusive).
        log: Sample on a log scale.
        fixed: If set, the parameter is not searched and always takes this value.
        powers_of_two: ``init_scale`` only: sample an integer exponent, scale = 2**k.
    """

    low: float
    high: float
    log: bool
    fixed: float | None = None
    powers_of_two: bool = False


@dataclass(frozen=True)
class SpaceConfig:
    """The search space: one :class:`ParamRange` per GradScaler setting."""

    init_scale: ParamRange = ParamRange(2.0**-20, 2.0**32, log=True)
    growth_factor: ParamRange = ParamRange(1.01, 8.0, log=True)
    backoff_factor: ParamRange = ParamRange(0.05, 0.95, log=False)
    growth_interval: ParamRange = ParamRange(1, 2000, log=True)


@dataclass(frozen=True)
class PenaltyConfig:
    """Penalty weights and failure thresholds; see :mod:`search.training._penalty` for why."""

    nonfinite: float = 10.0
    silent: float = 1.0
    skip: float = 0.1
    learn_threshold: float = 0.1
    churn_threshold: float = 0.5
    underflow_threshold: float = 0.5
    # What the objective reads of the final weights' evaluation: "mean", the loss on the whole set;
    # "median", the median chunk loss, which a few records the model cannot fit do not decide.
    evaluation: str = "mean"


@dataclass(frozen=True)
class RunConfig:
    """What to run and where to store it. ``0`` for a timeout means no limit."""

    trials: int = 100
    task: str = "seed-mlp"
    study_name: str = ""  # Empty: default_study_name(task).
    storage: str = "sqlite:///study.db"
    device: str = "auto"
    amp_dtype: str = "float16"
    epochs: int = 0  # Passes over the data; 0: the task's own default (seed-mlp: 30).
    steps: int = 0  # Optimizer steps instead of epochs; 0: as many as the epochs make.
    seed: int = 42
    sampler: str = "tpe"
    pruner: str = "none"
    timeout: float = 0.0
    trial_timeout: float = 0.0
    max_failed_trials: int = 10
    heartbeat_interval: int = 60  # Seconds; a RUNNING trial silent for 2x this is failed and retried.
    workers: int = 1  # Worker processes on this host.
    devices: str = ""  # CUDA device indices for the workers, e.g. "0,1"; empty = all visible.
    threads: int = 0  # torch intra-op threads per process; 0 = 1, or OMP_NUM_THREADS when set.
    storage_retry: float = 300.0  # Seconds to keep retrying an unreachable database mid-run.
    population: int = 1  # Sampled trials trained together in one process (search.training._population); 1: one at a time.
    batch_memory: float = 4096.0  # MiB a loader task's batches may take, held once per process (steps x batch).


@dataclass(frozen=True)
class Settings:
    """All settings of a run."""

    run: RunConfig = RunConfig()
    space: SpaceConfig = SpaceConfig()
    penalty: PenaltyConfig = PenaltyConfig()

    @property
    def study_name(self) -> str:
        """The study name; defaults to :func:`default_study_name` of the task."""
        return self.run.study_name or default_study_name(self.run.task)

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (the TOML layout), with unset ``fixed`` values left out."""
        data = asdict(self)
        for name, param in data["space"].items():
            if param["fixed"] is None:
                del param["fixed"]
            if name != "init_scale" and not param["powers_of_two"]:
                del param["powers_of_two"]
        return data


def default_study_name(task: str) -> str:
    """The study name a task gets without ``--study-name``.

    A built-in task keeps its name (``seed-mlp``). A user task's import path is not a readable name
    (``examples.noisy_regression:build``), so it is named after its module's last part
    (``noisy_regression``), with ``-callable`` appended when the callable is not ``build``, so that
    two tasks of one module do not collide (``tasks_for_tests:slow`` -> ``tasks_for_tests-slow``).
    The full path stays in the study's recorded settings (``task``). Neither part holds a dot, so
    the name never looks like search.confirm's ``<study>.confirm`` sibling.
    """
    if ":" not in task:
        return task
    module, _, attr = task.partition(":")
    base = module.rpartition(".")[2] or task
    return base if attr in ("build", "") else f"{base}-{attr}"


DEFAULTS = Settings()

SAMPLERS = ("tpe", "gp", "cmaes", "random")
PRUNERS = ("none", "median", "hyperband")
EVALUATIONS = ("mean", "median")
AMP_DTYPES = ("float16", "bfloat16")
_PARAM_KEYS = {f.name for f in fields(ParamRange)}
# K models, their optimizer states and K x batch activations live on the device at once; beyond
# this a population stops paying (a GPU is full long before) and a typo (--population 100000) is
# more likely than an intent.
MAX_POPULATION = 4096
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
_DEVICES_RE = re.compile(r"^\d+(,\d+)*$")


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
        for name, spec in space.items() if isinstance(space, dict) else ():
            searched = sorted(k for k in ("low", "high", "log", "powers_of_two") if k in spec) if isinstance(spec, dict) else []
            if searched and "fixed" in spec:
                raise ConfigError(
                    f"[space.{name}] sets fixed and {', '.join(searched)}: a fixed setting is not searched, keep one"
                )
        _merge(data, user, path="")
    for key, value in (overrides or {}).items():
        if value is not None:
            data["run"][key] = value
    settings = Settings(
        run=_build(RunConfig, data["run"], "run"),
        space=SpaceConfig(
            **{name: _build(ParamRange, spec, f"space.{name}") for name, spec in data["space"].items()}
        ),
        penalty=_build(PenaltyConfig, data["penalty"], "penalty"),
    )
    _validate(settings)
    return settings


def settings_from_dict(data: dict[str, Any]) -> Settings:
    """Rebuilds settings from :meth:`Settings.to_dict` output (as stored in a study)."""
    merged = DEFAULTS.to_dict()
    _merge(merged, data, path="")
    return Settings(
        run=_build(RunConfig, merged["run"], "run"),
        space=SpaceConfig(**{n: _build(ParamRange, s, n) for n, s in merged["space"].items()}),
        penalty=_build(PenaltyConfig, merged["penalty"], "penalty"),
    )


def _merge(base: dict[str, Any], user: dict[str, Any], path: str) -> None:
    for key, value in user.items():
        where = f"{path}.{key}" if path else key
        if key not in base and not (path.startswith("space.") and key in _PARAM_KEYS):
            raise ConfigError(f"unknown config key [{where}]")
        if isinstance(base.get(key), dict):
            if not isinstance(value, dict):
                raise ConfigError(f"[{where}] must be a table")
            _merge(base[key], value, where)
        else:
            base[key] = value


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    kwargs = {}
    for field in fields(cls):
        if field.name not in values:
            continue
        value = values[field.name]
        kind = field.type.split(" | ")[0] if isinstance(field.type, str) else field.type
        kwargs[field.name] = _coerce(value, kind, f"{where}.{field.name}")
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


# Optuna's schema holds study names of up to 512 characters; search.confirm's sibling study adds
# ".confirm" (search.results._confirmations.SUFFIX), so a search study's name must leave room for it.
MAX_STUDY_NAME = 512 - len(".confirm")


def _validate(s: Settings) -> None:
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

    # Open or closed intervals per GradScaler's own constraints.
    limits = {
        "init_scale": (lambda v: v > 0, "> 0"),
        "growth_factor": (lambda v: v > 1, "> 1"),
        "backoff_factor": (lambda v: 0 < v < 1, "in (0, 1)"),
        "growth_interval": (lambda v: v >= 1 and float(v).is_integer(), "a whole number >= 1"),
    }
    for name, (ok, rule) in limits.items():
        p: ParamRange = getattr(s.space, name)
        where = f"[space.{name}]"
        if p.fixed is not None:
            if not ok(p.fixed):
                raise ConfigError(f"{where} fixed must be {rule}, got {p.fixed:g}")
            continue
        for bound in ("low", "high"):
            if not ok(getattr(p, bound)):
                raise ConfigError(f"{where} {bound} must be {rule}, got {getattr(p, bound):g}")
        if p.low > p.high:
            raise ConfigError(f"{where} low ({p.low:g}) must not exceed high ({p.high:g})")
        if p.powers_of_two and name != "init_scale":
            raise ConfigError(f"{where} powers_of_two applies to init_scale only")
        if p.powers_of_two and math.floor(math.log2(p.high)) < math.ceil(math.log2(p.low)):
            raise ConfigError(f"{where} contains no power of two")

    pen = s.penalty
    if pen.evaluation not in EVALUATIONS:
        raise ConfigError(f"unknown [penalty] evaluation {pen.evaluation!r}: use one of {', '.join(EVALUATIONS)}")
    for name in ("nonfinite", "silent", "skip"):
        if getattr(pen, name) < 0:
            raise ConfigError(f"[penalty] {name} must be >= 0, got {getattr(pen, name):g}")
    for name in ("learn_threshold", "churn_threshold", "underflow_threshold"):
        if not 0 < getattr(pen, name) <= 1:
            raise ConfigError(f"[penalty] {name} must be in (0, 1], got {getattr(pen, name):g}")


def with_run(settings: Settings, **changes: Any) -> Settings:
    """Returns ``settings`` with some :class:`RunConfig` fields replaced."""
    return replace(settings, run=replace(settings.run, **changes))

"""The settings: their types, the built-in defaults (defined here, once), and a study's own part of the space.

``configs/default.toml`` mirrors :data:`DEFAULTS` exactly; a test checks it. Loading a config file is
:mod:`search.core._config`, checking its values :mod:`search.core._validation`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from search.scalers import FRAMEWORKS, GRADSCALER, RULES, Knob


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


def knob_range(knob: Knob) -> ParamRange:
    """The range a rule's knob is searched over by default (or the value it is fixed at)."""
    return ParamRange(knob.low, knob.high, knob.log, knob.fixed)


def rule_ranges(name: str) -> dict[str, ParamRange]:
    """The default ranges of a framework's knobs, by knob."""
    return {knob.name: knob_range(knob) for knob in RULES[name].knobs}


@dataclass(frozen=True)
class SpaceConfig:
    """The search space: one :class:`ParamRange` per GradScaler setting, and per knob of each
    framework's own scaler (``[space.deepspeed.hysteresis]``), searched under ``--scaler NAME``.
    The defaults are the knobs' own (:mod:`search.scalers`)."""

    init_scale: ParamRange = knob_range(GRADSCALER.knob("init_scale"))
    growth_factor: ParamRange = knob_range(GRADSCALER.knob("growth_factor"))
    backoff_factor: ParamRange = knob_range(GRADSCALER.knob("backoff_factor"))
    growth_interval: ParamRange = knob_range(GRADSCALER.knob("growth_interval"))
    deepspeed: dict[str, ParamRange] = field(default_factory=lambda: rule_ranges("deepspeed"))
    megatron: dict[str, ParamRange] = field(default_factory=lambda: rule_ranges("megatron"))
    fairseq: dict[str, ParamRange] = field(default_factory=lambda: rule_ranges("fairseq"))

    def ranges(self, scaler: str) -> dict[str, ParamRange]:
        """The ranges ``--scaler scaler`` searches, by knob: at the top of ``[space]`` (GradScaler's four
        settings) or in the rule's own table (a framework's knobs)."""
        rule = RULES[scaler]
        if rule.space_table:
            return dict(getattr(self, rule.space_table))
        return {name: getattr(self, name) for name in rule.names}


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
    population: int = (
        1  # Sampled trials trained together in one process (search.training._population); 1: one at a time.
    )
    batch_memory: float = (
        4096.0  # MiB a loader task's batches may take, held once per process (steps x batch).
    )
    scaler: (
        str
    ) = (  # Whose loss-scale rule the trials follow (search.scalers): torch, deepspeed, megatron, fairseq.
        "torch"
    )
    checkpoint: str = ""  # The checkpoint every run continues (search.tasks.read_checkpoint); "": none.


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
            for knob in param.values() if name in FRAMEWORKS else ():
                _drop_unset(knob, keep_powers=False)
                if "fixed" in knob:  # A fixed knob is written as configs/default.toml writes it: fixed alone.
                    del knob["low"], knob["high"], knob["log"]
            if name not in FRAMEWORKS:
                _drop_unset(param, keep_powers=GRADSCALER.knob(name).powers_of_two)
        return data


def own_space(space: dict[str, Any], scaler: str) -> dict[str, Any]:
    """The part of a config's ``[space]`` (as :meth:`Settings.to_dict` writes it) that ``scaler``'s rule
    searches: its own table, or GradScaler's four at the top. A study records this much."""
    table = RULES[scaler].space_table
    return dict(space[table]) if table else {k: v for k, v in space.items() if k in RULES[scaler].names}


def space_layout(own: dict[str, Any], scaler: str) -> dict[str, Any]:
    """:func:`own_space`'s result put back where a config's ``[space]`` holds it."""
    table = RULES[scaler].space_table
    return {table: own} if table else dict(own)


def _drop_unset(param: dict[str, Any], keep_powers: bool) -> None:
    if param["fixed"] is None:
        del param["fixed"]
    if not keep_powers and not param["powers_of_two"]:
        del param["powers_of_two"]


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


def with_run(settings: Settings, **changes: Any) -> Settings:
    """Returns ``settings`` with some :class:`RunConfig` fields replaced."""
    return replace(settings, run=replace(settings.run, **changes))

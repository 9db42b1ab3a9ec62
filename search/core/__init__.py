"""What every layer shares: the settings, the search space, the trial record, devices, signals.

* ``_settings``: the settings: their types and the defaults (once);
* ``_validation``: each setting against what the service and the chosen scaler accept;
* ``_config``: loading settings: defaults, a TOML file, flags, each value validated;
* ``_space``: a rule's search space as Optuna distributions, a trial's setting, the baselines;
* ``_record``: the trial record, its one owner: attr keys, baseline names, failure codes, finished
  states, reading a trial back;
* ``_devices``: ``--device`` resolution, the device and process labels stored with trials;
* ``_interrupts``: SIGINT/SIGTERM as an exception, held while a trial is written;
* ``_errors``: :class:`UsageError`, bad input in any layer (one line, exit 2).

Nothing here imports torch at import time (``_devices`` imports it when a device is resolved).
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.core._config import load_settings, settings_from_dict
from search.core._devices import device_label, process_token, resolve_device
from search.core._errors import IncompatibleStudyError, UsageError
from search.core._interrupts import (
    INTERRUPTS,
    WORKER_ENV,
    Interrupted,
    deferred_interrupts,
    held_interrupts,
    interrupts_as_exceptions,
    raise_interrupted,
    raise_pending,
    record_interrupts,
    take_pending,
)
from search.core._settings import (
    DEFAULTS,
    ConfigError,
    ParamRange,
    PenaltyConfig,
    RunConfig,
    Settings,
    SpaceConfig,
    default_study_name,
    knob_range,
    own_space,
    space_layout,
    with_run,
)
from search.core._validation import MAX_POPULATION, MAX_STUDY_NAME, SAMPLERS

if TYPE_CHECKING:  # Loaded on first use: _record and _space import optuna (about 1 s).
    from search.core._record import (
        BASELINE,
        CHECK,
        CONFIG,
        CONFIRM_SUFFIX,
        CORNER,
        DATA_SEED,
        DEFAULT_BASELINE,
        DEVICE,
        DIAGNOSIS_BASELINE,
        ENDED_BY_RULE,
        EVAL_LOSS,
        EVAL_MEDIAN,
        FAIL_REASON,
        FAIL_TRACEBACK,
        FAILURE,
        FINAL_LOSS,
        FINISHED,
        LEARNED,
        LOSS_CURVE,
        NONFINITE,
        OVERFLOW_STEPS,
        OVERFLOWS_AT_MINIMUM,
        POINT,
        POPULATION,
        RECORDED_DIAGNOSIS,
        ROUNDING_OF,
        RULE_ATTRS,
        RULE_FAILURES,
        RUN_ATTRS,
        SCALE_CURVE,
        SILENT_FAILURES,
        SKIPPED_STEPS,
        SOURCE_TRIAL,
        STEPS_AT_MINIMUM,
        STUDY_DIAGNOSIS,
        TRAIN_SECONDS,
        WORKER,
        Showcase,
        baseline_of,
        default_trial,
        device_kind,
        failure_of,
        scale_moves,
        showcase,
        skipped_of,
        unfinished_baselines,
        waiting_baseline,
        waiting_rounding,
    )
    from search.core._space import (
        POW2_NAME,
        PYTORCH_DEFAULT,
        SEED_BASELINES,
        baseline_trials,
        diagnosis_trial,
        distributions,
        growth_note,
        pow2_name,
        scaler_config,
        setting_of,
        suggest,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "BASELINE", "CHECK", "CONFIG", "CONFIRM_SUFFIX", "CORNER", "ConfigError", "DATA_SEED", "DEFAULTS",
    "DEFAULT_BASELINE", "DEVICE", "DIAGNOSIS_BASELINE", "ENDED_BY_RULE", "EVAL_LOSS", "EVAL_MEDIAN",
    "FAILURE", "FAIL_REASON", "FAIL_TRACEBACK", "FINAL_LOSS", "FINISHED", "INTERRUPTS",
    "IncompatibleStudyError", "Interrupted", "LEARNED", "LOSS_CURVE", "MAX_POPULATION", "MAX_STUDY_NAME",
    "NONFINITE", "OVERFLOWS_AT_MINIMUM", "OVERFLOW_STEPS", "POINT", "POPULATION", "POW2_NAME",
    "PYTORCH_DEFAULT", "ParamRange", "PenaltyConfig", "RECORDED_DIAGNOSIS", "ROUNDING_OF", "RULE_ATTRS",
    "RULE_FAILURES", "RUN_ATTRS", "RunConfig", "SAMPLERS", "SCALE_CURVE", "SEED_BASELINES", "SILENT_FAILURES",
    "SKIPPED_STEPS", "SOURCE_TRIAL", "STEPS_AT_MINIMUM", "STUDY_DIAGNOSIS", "Settings", "Showcase",
    "SpaceConfig", "TRAIN_SECONDS", "UsageError", "WORKER", "WORKER_ENV", "baseline_of", "baseline_trials",
    "default_study_name", "default_trial", "deferred_interrupts", "device_kind", "device_label",
    "diagnosis_trial", "distributions", "failure_of", "growth_note", "held_interrupts",
    "interrupts_as_exceptions", "knob_range", "load_settings", "own_space", "pow2_name", "process_token",
    "raise_interrupted", "raise_pending", "record_interrupts", "resolve_device", "scale_moves",
    "scaler_config", "setting_of", "settings_from_dict", "showcase", "skipped_of", "space_layout", "suggest",
    "take_pending", "unfinished_baselines", "waiting_baseline", "waiting_rounding", "with_run",
]

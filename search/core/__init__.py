"""What every layer shares: the settings, the search space, the trial record, devices, signals.

* ``_config``: the settings: the defaults (once), TOML loading;
* ``_validation``: each setting against what the service and the chosen scaler accept;
* ``_space``: a rule's search space as Optuna distributions, a trial's setting, the baselines;
* ``_record``: the trial record, its one owner: attr keys, baseline names, failure codes, finished
  states, reading a trial back;
* ``_devices``: ``--device`` resolution, the device and process labels stored with trials;
* ``_interrupts``: SIGINT/SIGTERM as an exception, held while a trial is written;
* ``_errors``: :class:`UsageError`, bad input in any layer (one line, exit 2).

Nothing here imports torch at import time (``_devices`` imports it when a device is resolved).
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_config": (
            "DEFAULTS",
            "ConfigError",
            "ParamRange",
            "PenaltyConfig",
            "RunConfig",
            "Settings",
            "SpaceConfig",
            "knob_range",
            "own_space",
            "space_layout",
            "default_study_name",
            "load_settings",
            "settings_from_dict",
            "with_run",
        ),
        "_validation": ("MAX_POPULATION", "MAX_STUDY_NAME", "SAMPLERS"),
        "_space": (
            "POW2_NAME",
            "PYTORCH_DEFAULT",
            "SEED_BASELINES",
            "baseline_trials",
            "diagnosis_trial",
            "distributions",
            "growth_note",
            "pow2_name",
            "scaler_config",
            "setting_of",
            "suggest",
        ),
        "_record": (
            "BASELINE",
            "CHECK",
            "CONFIG",
            "CONFIRM_SUFFIX",
            "CORNER",
            "DATA_SEED",
            "DEFAULT_BASELINE",
            "DIAGNOSIS_BASELINE",
            "STUDY_DIAGNOSIS",
            "RECORDED_DIAGNOSIS",
            "DEVICE",
            "ENDED_BY_RULE",
            "EVAL_LOSS",
            "EVAL_MEDIAN",
            "FAILURE",
            "FAIL_REASON",
            "FAIL_TRACEBACK",
            "FINAL_LOSS",
            "FINISHED",
            "LEARNED",
            "LOSS_CURVE",
            "NONFINITE",
            "OVERFLOWS_AT_MINIMUM",
            "OVERFLOW_STEPS",
            "POINT",
            "POPULATION",
            "ROUNDING_OF",
            "RULE_ATTRS",
            "RUN_ATTRS",
            "SCALE_CURVE",
            "RULE_FAILURES",
            "SILENT_FAILURES",
            "SKIPPED_STEPS",
            "SOURCE_TRIAL",
            "STEPS_AT_MINIMUM",
            "TRAIN_SECONDS",
            "WORKER",
            "Showcase",
            "baseline_of",
            "default_trial",
            "device_kind",
            "failure_of",
            "scale_moves",
            "skipped_of",
            "showcase",
            "unfinished_baselines",
            "waiting_baseline",
            "waiting_rounding",
        ),
        "_devices": ("device_label", "process_token", "resolve_device"),
        "_interrupts": (
            "INTERRUPTS",
            "WORKER_ENV",
            "Interrupted",
            "deferred_interrupts",
            "held_interrupts",
            "interrupts_as_exceptions",
            "raise_interrupted",
            "raise_pending",
            "record_interrupts",
            "take_pending",
        ),
        "_errors": ("UsageError",),
    },
)

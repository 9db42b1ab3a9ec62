"""Diagnosis: whether loss scaling is a run's problem at all, and which one.

From a log (no torch, no Optuna: ``search.diagnose --log`` answers in a fraction of a second):

* ``_log_lines``: the loss-scaler lines of DeepSpeed, apex and fairseq logs, each read into a :class:`LogLine`;
* ``_log_reading``: a whole log read: skipped steps, the scale over time, when it settled, and its verdict.

From training (the settings in fp16 beside fp32 and bf16 controls):

* ``_observer``: a run watched step by step (gradients per parameter, forward outputs per layer) (torch);
* ``_runs``: the three runs of a diagnosis, each through :func:`search.training.train` (torch);
* ``_evidence``: what a diagnosed run measured, as plain numbers (no torch);
* ``_training_verdict``: the verdict, the scales the gradients need, the suggested start (no torch);
* ``_training``: a whole diagnosis, its printed lines and its JSON (no torch);
* ``_narrowing``: a diagnosis's JSON (or the record a study keeps of it) as the start of a search: the starting scale
  around its suggestion, the growth interval within its window.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_log_lines": ("GROWTH", "HYSTERESIS", "MINIMUM", "OVERFLOW", "PROGRESS", "LogLine", "read_line"),
        "_log_reading": ("CHRONIC_RATE", "TITLES", "LogError", "LogReading", "read_log"),
        "_evidence": (
            "FP16_MAX", "FP16_SMALLEST", "DiagnosisRuns", "LayerForward", "ParameterGradients", "RunEvidence"
        ),
        "_observer": ("RunObserver", "StepReading"),
        "_training_verdict": (
            "HEALTHY_ADVICE", "VERDICTS", "TrainingVerdict", "expected_skip_rate", "growth_window", "judge", "scale_text", "settled_step"
        ),
        "_narrowing": (
            "NO_START", "OCTAVES", "DiagnosisFileError", "DiagnosisStart", "narrowed_space", "read_diagnosis",
            "recorded_start", "setting_text",
        ),
        "_training": ("SkipCause", "TrainingDiagnosis", "format_training"),
        "_runs": ("bf16_supported", "diagnosis_runs", "start_steps"),
    },
)

"""Diagnosis: whether loss scaling is a run's problem at all, and which one.

From a log (no torch, no Optuna: ``search.diagnose --log`` answers in a fraction of a second):

* ``_log_lines``: the loss-scaler lines of DeepSpeed, apex and fairseq logs, each read into a
  :class:`LogLine`;
* ``_log_reading``: a whole log read: skipped steps, the scale over time, when it settled, and its verdict.

From training (the settings in fp16 beside fp32 and bf16 controls):

* ``_observer``: a run watched step by step (gradients per parameter, forward outputs per layer) (torch);
* ``_training_runs``: the three runs of a diagnosis, each through :func:`search.training.train` (torch);
* ``_evidence``: what a diagnosed run measured, as plain numbers (no torch);
* ``_training_verdict``: the verdict, the scales the gradients need, the suggested start (no torch);
* ``_suggestion_check``: the suggested setting's own fp16 run keeps or withdraws the suggestion (no torch);
* ``_training``: a whole diagnosis, its printed lines and its JSON (no torch);
* ``_narrowing``: a diagnosis's JSON (or the record a study keeps of it) as the start of a search: the
  starting scale around its suggestion, the growth interval within its window.

Kept in a study:

* ``_recorded_diagnosis``: a diagnosis recorded in a study (``search.diagnose --storage``), read back for
  ``search.optimize --from-diagnosis``, and the runs it fits (Optuna, a storage).
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.diagnosis._advice import scale_text
from search.diagnosis._evidence import (
    FP16_MAX,
    FP16_SMALLEST,
    DiagnosisRuns,
    LayerForward,
    ParameterGradients,
    RunEvidence,
)
from search.diagnosis._log_lines import GROWTH, HYSTERESIS, MINIMUM, OVERFLOW, PROGRESS, LogLine, read_line
from search.diagnosis._log_reading import (
    CHRONIC_RATE,
    LIMITS,
    TITLES,
    LogError,
    LogReading,
    format_reading,
    read_log,
    read_log_file,
)
from search.diagnosis._narrowing import (
    NO_START,
    OCTAVES,
    DiagnosisFileError,
    DiagnosisStart,
    narrowed_space,
    not_a_search,
    read_diagnosis,
    recorded_start,
    setting_text,
    why_no_search,
)
from search.diagnosis._suggestion_check import SuggestionCheck, checked_suggestion, suggestion_of
from search.diagnosis._training import SkipCause, TrainingDiagnosis, format_training
from search.diagnosis._training_verdict import (
    HEALTHY_ADVICE,
    VERDICTS,
    TrainingVerdict,
    expected_skip_rate,
    growth_window,
    judge,
    settled_step,
)

# Loaded on first use: _observer and _training_runs import torch, _recorded_diagnosis Optuna.
if TYPE_CHECKING:
    from search.diagnosis._observer import RunObserver, StepReading
    from search.diagnosis._recorded_diagnosis import (
        DiagnosedRun,
        RecordingTarget,
        diagnosis_conflict,
        diagnosis_record,
        diagnosis_start,
        open_for_recording,
        read_recorded_diagnosis,
        record_diagnosis,
        recorded_diagnosis,
        recorded_line,
        recording_conflict,
        study_run,
    )
    from search.diagnosis._training_runs import (
        bf16_supported,
        checkpoint_setting,
        diagnose_training,
        diagnosis_run_length,
        diagnosis_runs,
        start_steps,
        suggestion_run,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "CHRONIC_RATE",
    "LIMITS",
    "format_reading",
    "DiagnosedRun",
    "DiagnosisFileError",
    "DiagnosisRuns",
    "DiagnosisStart",
    "FP16_MAX",
    "FP16_SMALLEST",
    "GROWTH",
    "HEALTHY_ADVICE",
    "HYSTERESIS",
    "LayerForward",
    "LogError",
    "LogLine",
    "LogReading",
    "MINIMUM",
    "NO_START",
    "OCTAVES",
    "OVERFLOW",
    "PROGRESS",
    "ParameterGradients",
    "RecordingTarget",
    "RunEvidence",
    "RunObserver",
    "SkipCause",
    "SuggestionCheck",
    "StepReading",
    "TITLES",
    "TrainingDiagnosis",
    "TrainingVerdict",
    "VERDICTS",
    "bf16_supported",
    "checked_suggestion",
    "diagnosis_conflict",
    "diagnosis_record",
    "diagnosis_start",
    "checkpoint_setting",
    "diagnose_training",
    "diagnosis_run_length",
    "diagnosis_runs",
    "expected_skip_rate",
    "format_training",
    "growth_window",
    "judge",
    "narrowed_space",
    "not_a_search",
    "open_for_recording",
    "read_diagnosis",
    "read_line",
    "read_log",
    "read_log_file",
    "read_recorded_diagnosis",
    "record_diagnosis",
    "recorded_diagnosis",
    "recorded_line",
    "recorded_start",
    "recording_conflict",
    "scale_text",
    "setting_text",
    "settled_step",
    "start_steps",
    "study_run",
    "suggestion_of",
    "suggestion_run",
    "why_no_search",
]

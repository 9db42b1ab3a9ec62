"""Diagnosis: whether loss scaling is a run's problem at all, and which one.

* ``_log_lines``: the loss-scaler lines of DeepSpeed, apex and fairseq logs, each read into a :class:`LogLine`;
* ``_log_reading``: a whole log read: skipped steps, the scale over time, when it settled, and its verdict.

Never imports torch: ``search.diagnose --log`` explains a log in a fraction of a second.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_log_lines": ("GROWTH", "HYSTERESIS", "MINIMUM", "OVERFLOW", "PROGRESS", "LogLine", "read_line"),
        "_log_reading": ("CHRONIC_RATE", "TITLES", "LogError", "LogReading", "read_log"),
    },
)

"""Hyperparameter search for mixed-precision (AMP) loss scaling.

The command is ``python -m search.optimize``; this package's public API lets a script run the same
pieces: build a task's :class:`Problem`, train it with a :class:`ScalerConfig`, judge the run, and
drive a study with :class:`Runner`.
"""

from search.config import DEFAULTS
from search.config import ConfigError
from search.config import PenaltyConfig
from search.config import Settings
from search.config import load_settings
from search.penalty import Assessment
from search.penalty import assess
from search.runner import Runner
from search.space import SEED_BASELINES
from search.storage import mask_url
from search.storage import open_storage
from search.study import prepare_study
from search.summary import format_summary
from search.summary import summarize
from search.tasks import Problem
from search.tasks import resolve_task
from search.trainer import ScalerConfig
from search.trainer import TrainResult
from search.trainer import train


__all__ = [
    "Assessment",
    "ConfigError",
    "DEFAULTS",
    "PenaltyConfig",
    "Problem",
    "Runner",
    "SEED_BASELINES",
    "ScalerConfig",
    "Settings",
    "TrainResult",
    "assess",
    "format_summary",
    "load_settings",
    "mask_url",
    "open_storage",
    "prepare_study",
    "resolve_task",
    "summarize",
    "train",
]

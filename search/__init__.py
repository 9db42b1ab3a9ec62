"""Hyperparameter search for mixed-precision (AMP) loss scaling.

The commands are ``python -m search.optimize`` (the search), ``search.transfer`` (move a study),
``search.dashboard`` (optuna-dashboard with curves), ``search.report`` and ``search.confirm``; this
package's public API lets a script run the same pieces: build a task's :class:`Problem`, train it
with a :class:`ScalerConfig` (or K of them at once with :func:`train_population`), judge the run, evaluate it and :func:`recommend` a setting from a study's trials, drive a study with :class:`Runner`, copy it with
:func:`transfer_study` and publish its figures with :func:`publish`.
"""

# First, before torch and optuna import: a Ctrl-C while a command starts ends it with one line.
from search import startup

startup.guard()

from search.analysis import Recommendation, recommend
from search.config import DEFAULTS, ConfigError, PenaltyConfig, Settings, load_settings
from search.evaluation import Evaluation, evaluate
from search.figures import curves_figure
from search.penalty import Assessment, assess
from search.population import PopulationError, train_population
from search.runner import Runner
from search.space import SEED_BASELINES
from search.storage import mask_url, open_storage
from search.study import prepare_study
from search.summary import format_summary, summarize
from search.tasks import Problem, resolve_task
from search.trainer import ScalerConfig, TrainResult, batch_plan, train
from search.workers import plan_workers

# Imported on first use: search.transfer is a command (importing it here would make ``python -m``
# warn that it was imported before it ran), and publishing pulls in plotly and optuna-dashboard.
_LAZY = {
    "publish": "search.publishing",
    "TransferReport": "search.transfer",
    "transfer_study": "search.transfer",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")


__all__ = [
    "Assessment",
    "ConfigError",
    "DEFAULTS",
    "Evaluation",
    "PenaltyConfig",
    "PopulationError",
    "Problem",
    "Recommendation",
    "Runner",
    "SEED_BASELINES",
    "ScalerConfig",
    "Settings",
    "TrainResult",
    "TransferReport",
    "assess",
    "batch_plan",
    "curves_figure",
    "evaluate",
    "format_summary",
    "load_settings",
    "mask_url",
    "open_storage",
    "plan_workers",
    "prepare_study",
    "publish",
    "recommend",
    "resolve_task",
    "summarize",
    "train",
    "train_population",
    "transfer_study",
]

"""Hyperparameter search for mixed-precision (AMP) loss scaling.

The commands are ``python -m search.optimize`` (the search), ``search.confirm`` (the answer tested on
new seeds), ``search.report`` (one HTML page), ``search.dashboard`` (optuna-dashboard with curves),
``search.transfer`` (move a study) and ``search.diagnose`` (a training log's loss scaling explained). They
are thin layers over the library's subpackages, grouped by job (docs/internals.md draws them):

* :mod:`search.core`: settings, the search space, the trial record, devices, signals;
* :mod:`search.tasks`: the built-in tasks and the :class:`Problem` interface a task of your own implements;
* :mod:`search.training`: one AMP training run and its judgement, knowing nothing of Optuna;
* :mod:`search.storage`: storage URLs, trial writes, retries, heartbeats;
* :mod:`search.study`: creating and resuming a study, the trial loop, samplers, worker processes;
* :mod:`search.confirmation`: the answer re-run on new seeds beside the default, the corners checked;
* :mod:`search.results`: safe ranges, the recommendation, confirmation, the summary;
* :mod:`search.publishing`: figures, dashboard notes, trial pictures, the HTML report;
* :mod:`search.diagnosis`: whether loss scaling is a run's problem: a training log's loss-scaler lines read,
  or the settings trained beside fp32 and bf16 controls, and the verdict they support; a diagnosis kept in a
  study;
* :mod:`search.cli`: the command skeleton.

This package's API lets a script run the same pieces: build a task's :class:`Problem`, train it with
a :class:`ScalerConfig` (or K of them at once with :func:`train_population`), judge the run, evaluate
it and :func:`recommend` a setting from a study's trials, drive a study with :class:`Runner`, copy it
with :func:`transfer_study` and publish its figures with :func:`publish`. The names whose modules import
torch, Optuna, SQLAlchemy or plotly are imported on first use, so ``import search`` imports none of them.
"""

# First, before torch and optuna import: a Ctrl-C while a command starts ends it with one line.
from search.cli import _startup

_startup.guard()

from typing import TYPE_CHECKING  # noqa: E402

from search._lazy import lazy_face  # noqa: E402
from search.core import DEFAULTS, ConfigError, PenaltyConfig, Settings, load_settings  # noqa: E402
from search.scalers import ScalerConfig  # noqa: E402
from search.study import plan_workers  # noqa: E402
from search.tasks import resolve_task  # noqa: E402

if TYPE_CHECKING:  # Loaded on first use: these import torch, Optuna, SQLAlchemy or plotly.
    from search.core import SEED_BASELINES
    from search.publishing import curves_figure, publish
    from search.results import Recommendation, format_summary, recommend, summarize
    from search.storage import TransferReport, mask_url, open_storage, transfer_study
    from search.study import Runner, prepare_study
    from search.tasks import LoaderProblem, Problem
    from search.training import (
        Assessment,
        Evaluation,
        PopulationError,
        TrainResult,
        assess,
        batch_plan,
        evaluate,
        train,
        train_population,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "Assessment",
    "ConfigError",
    "DEFAULTS",
    "Evaluation",
    "LoaderProblem",
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

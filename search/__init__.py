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
* :mod:`search.results`: safe ranges, the recommendation, confirmation, the summary;
* :mod:`search.publishing`: figures, dashboard notes, trial pictures, the HTML report;
* :mod:`search.diagnosis`: a training log's loss-scaler lines read, and the verdict they support;
* :mod:`search.cli`: the command skeleton.

This package's API lets a script run the same pieces: build a task's :class:`Problem`, train it with
a :class:`ScalerConfig` (or K of them at once with :func:`train_population`), judge the run, evaluate
it and :func:`recommend` a setting from a study's trials, drive a study with :class:`Runner`, copy it
with :func:`transfer_study` and publish its figures with :func:`publish`. Every name is imported on
first use, so ``import search`` imports neither torch nor Optuna.
"""

# First, before torch and optuna import: a Ctrl-C while a command starts ends it with one line.
from search.cli import _startup

_startup.guard()

from search._exports import lazy_exports  # noqa: E402

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "core": ("DEFAULTS", "SEED_BASELINES", "ConfigError", "PenaltyConfig", "Settings", "load_settings"),
        "scalers": ("ScalerConfig",),
        "tasks": ("LoaderProblem", "Problem", "resolve_task"),
        "training": ("Assessment", "Evaluation", "PopulationError", "TrainResult", "assess", "batch_plan", "evaluate",
                     "train", "train_population"),
        "storage": ("TransferReport", "mask_url", "open_storage", "transfer_study"),
        "study": ("Runner", "plan_workers", "prepare_study"),
        "results": ("Recommendation", "format_summary", "recommend", "summarize"),
        "publishing": ("curves_figure", "publish"),
    },
)

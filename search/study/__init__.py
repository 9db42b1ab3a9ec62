"""A study from start to finish: creating or resuming it, the trial loop, samplers, worker processes.

* ``_plan``: a run checked before a byte is written (light checks before torch), its step count;
* ``_search_run``: a checked plan run: the study done already, its trials here or with ``--workers``;
* ``_run_parts``: what a run is made of: "is this study done?" (one function for every process), its start,
  the trial loop and its progress bar, the summary;
* ``_run_with_workers``: ``--workers K``: the parent's run over K processes, and a worker process's life;
* ``_logging``: the run's warnings on stderr, the storage URL masked;
* ``_prepare``: create or resume a study: recorded settings, compatibility, the baselines enqueued;
* ``_trial_loop``: the trial loop (:class:`Runner`): reads the study, picks each trial's path, stops when
  done;
* ``_queued``: queued trials (baselines, retries): claimed from storage, trained, finished;
* ``_sampled``: sampled trials: asked of the replica, trained, written whole (or RUNNING when shared);
* ``_run_length``: ``--run-steps N``: the answer and the default trained N steps, their skips measured;
* ``_rounding_trials``: the answer's line rounded, queued as trials before a run stops (measured, not
  assumed);
* ``_population_trials``: ``--population K``: K sampled trials trained together, written at once;
* ``_trial_training``: training a trial or a population for the loop, and accounting a failure;
* ``_in_flight``: the trial in flight, and what became of it after a signal;
* ``_stale``: failing the RUNNING trials of dead workers, so that Optuna queues them again;
* ``_replica``: the in-memory study the sampler runs against;
* ``_sampling``: samplers, pruners and the per-worker sampler seed;
* ``_workers``: ``--workers``: the device plan, worker processes, signal forwarding;
* ``_fork_server``: imported first by the fork server the worker processes are forked from;
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.study._plan import NothingToRun, RunPlan, plan_run
from search.study._workers import (
    DevicePlanError,
    PoolResult,
    WorkerSpec,
    plan_workers,
    run_pool,
    threads_per_process,
    worker_context,
)

if TYPE_CHECKING:  # Loaded on first use: these import optuna, and the trial loop's modules torch too.
    from search.study._in_flight import InFlight
    from search.study._logging import log_warnings
    from search.study._population_trials import population_size, run_population_trials
    from search.study._prepare import (
        StudyHandle,
        inspect_study,
        prepare_study,
    )
    from search.study._queued import run_queued_trial
    from search.study._replica import Replica
    from search.study._run_length import measure_run_length, publish_run_length
    from search.study._run_parts import RunOutcome, study_is_done
    from search.study._run_with_workers import GAVE_UP_ON_STORAGE, run_workers, worker_process
    from search.study._sampled import run_sampled_trial
    from search.study._sampling import make_pruner, make_sampler, sampler_seed
    from search.study._search_run import run_plan
    from search.study._stale import fail_stale_trials
    from search.study._trial_loop import Runner, RunStats, TooManyFailures
    from search.study._trial_training import WORKER, TrialTraining, raise_task_exit

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "DevicePlanError",
    "GAVE_UP_ON_STORAGE",
    "InFlight",
    "NothingToRun",
    "PoolResult",
    "Replica",
    "RunOutcome",
    "RunPlan",
    "RunStats",
    "Runner",
    "StudyHandle",
    "TooManyFailures",
    "TrialTraining",
    "WORKER",
    "WorkerSpec",
    "fail_stale_trials",
    "inspect_study",
    "log_warnings",
    "make_pruner",
    "measure_run_length",
    "publish_run_length",
    "make_sampler",
    "plan_run",
    "plan_workers",
    "population_size",
    "prepare_study",
    "raise_task_exit",
    "run_plan",
    "run_pool",
    "run_population_trials",
    "run_queued_trial",
    "run_sampled_trial",
    "run_workers",
    "sampler_seed",
    "study_is_done",
    "threads_per_process",
    "worker_context",
    "worker_process",
]

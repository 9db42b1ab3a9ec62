"""A study from start to finish: creating or resuming it, the trial loop, samplers, worker processes.

* ``_plan``: a run checked before a byte is written (light checks before torch), its step count;
* ``_run``: one run: "is this study done?" (one function for every process), the trials here, the summary;
* ``_pool_run``: ``--workers K``: the parent's run over K processes, and a worker process's life;
* ``_logging``: the run's warnings on stderr, the storage URL masked;
* ``_prepare``: create or resume a study: recorded settings, compatibility, the baselines enqueued;
* ``_runner``: the trial loop: queued and sampled trials, failures, stale trials;
* ``_replica``: the in-memory study the sampler runs against;
* ``_sampling``: samplers, pruners and the per-worker sampler seed;
* ``_workers``: ``--workers``: the device plan, worker processes, signal forwarding.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_prepare": (
            "IncompatibleStudyError",
            "StudyHandle",
            "finished_and_best",
            "inspect_study",
            "prepare_study",
            "resolve_study_name",
            "settings_of",
        ),
        "_plan": ("NothingToRun", "RunPlan", "plan_run"),
        "_run": ("RunOutcome", "run_plan", "study_is_done"),
        "_pool_run": ("GAVE_UP_ON_STORAGE", "run_workers", "worker_process"),
        "_logging": ("log_warnings",),
        "_runner": ("RunStats", "Runner", "TooManyFailures"),
        "_replica": ("Replica",),
        "_sampling": ("make_pruner", "make_sampler", "sampler_seed"),
        "_workers": (
            "DevicePlanError",
            "PoolResult",
            "WorkerSpec",
            "plan_workers",
            "run_pool",
            "threads_per_process",
        ),
    },
)

"""A study from start to finish: creating or resuming it, the trial loop, samplers, worker processes,
confirmation runs.

* ``_plan``: a run checked before a byte is written (light checks before torch), its step count;
* ``_run``: one run: "is this study done?" (one function for every process), the trials here, the summary;
* ``_pool_run``: ``--workers K``: the parent's run over K processes, and a worker process's life;
* ``_logging``: the run's warnings on stderr, the storage URL masked;
* ``_prepare``: create or resume a study: recorded settings, compatibility, the baselines enqueued;
* ``_recorded_diagnosis``: a diagnosis kept in a study (``search.diagnose --storage``), and the runs it fits;
* ``_runner``: the trial loop: reads the study, picks each trial's path, stops when done;
* ``_queued``: queued trials (baselines, retries): claimed from storage, trained, finished;
* ``_sampled``: sampled trials: asked of the replica, trained, written whole (or RUNNING when shared);
* ``_population_trials``: ``--population K``: K sampled trials trained together, written at once;
* ``_trial_training``: training a trial or a population for the loop, and accounting a failure;
* ``_in_flight``: the trial in flight, and what became of it after a signal;
* ``_stale``: failing the RUNNING trials of dead workers, so that Optuna queues them again;
* ``_replica``: the in-memory study the sampler runs against;
* ``_sampling``: samplers, pruners and the per-worker sampler seed;
* ``_workers``: ``--workers``: the device plan, worker processes, signal forwarding;
* ``_confirmation_plan``: what a confirmation still has to run: the study and its sibling checked;
* ``_confirmation_runs``: confirmation runs and corners trained and written into ``<study>.confirm``.
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
        "_queued": ("run_queued_trial",),
        "_sampled": ("run_sampled_trial",),
        "_population_trials": ("population_size", "run_population_trials"),
        "_trial_training": ("WORKER", "TrialTraining", "raise_task_exit"),
        "_in_flight": ("InFlight",),
        "_stale": ("fail_stale_trials",),
        "_replica": ("Replica",),
        "_sampling": ("make_pruner", "make_sampler", "sampler_seed"),
        "_workers": (
            "DevicePlanError",
            "PoolResult",
            "WorkerSpec",
            "plan_workers",
            "run_pool",
            "threads_per_process",
            "worker_context",
        ),
        "_recorded_diagnosis": (
            "DiagnosedRun",
            "RecordingTarget",
            "diagnosis_conflict",
            "diagnosis_record",
            "not_a_search",
            "open_for_recording",
            "read_recorded_diagnosis",
            "record_diagnosis",
            "recorded_diagnosis",
            "recording_conflict",
            "study_run",
            "why_no_search",
        ),
        "_confirmation_plan": ("ConfirmError", "ConfirmationPlan", "plan_confirmation"),
        "_confirmation_runs": ("ConfirmationRuns", "run_confirmation"),
    },
)

"""Training tasks: the built-in ones by name, and user tasks as ``package.module:callable``.

A task is a callable ``build(seed: int) -> Problem``. It must be deterministic in ``seed``:
the same seed gives the same data and initial weights in every process.
"""

from search._exports import lazy_exports

# The modules seed_mlp, deep_mlp and sum_outliers hold the built-in tasks (named in _resolve's BUILTIN_TASKS); base
# holds the Problem interface, _loader the LoaderProblem one (batches from a DataLoader); _resolve turns a name into a task without importing torch; _build
# builds and checks the Problem.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "base": ("Problem",),
        "_loader": ("BatchError", "LoaderProblem"),
        "_resolve": ("BUILTIN_TASKS", "Task", "TaskError", "resolve_task", "task_target"),
        "_build": ("StepCost", "build_problem", "probe_step", "step_cost"),
    },
)

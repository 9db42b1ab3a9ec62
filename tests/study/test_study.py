"""search.study._prepare: what a refused resume says; search.study._plan: the start-up probe's cost warning.
"""

from __future__ import annotations

from search.study._prepare import _differences

from conftest import run_cli


def _attrs(**changes) -> dict:
    base = {
        "task": "seed-mlp",
        "epochs": 30,
        "steps": 0,
        "seed": 42,
        "amp_dtype": "float16",
        "space": {},
        "penalty": {},
        "fingerprint": "abc",
        "measurement": 2,
    }
    return {**base, **changes}


def test_another_torch_build_is_named_only_when_task_and_seed_match():
    assert _differences(_attrs(), _attrs(fingerprint="def")) == [
        "the task's data/initial weights differ (another torch build?)"
    ]
    # The seed explains the other data and weights (issue 15): say that, not "another torch build?".
    assert _differences(_attrs(), _attrs(seed=7, fingerprint="def")) == ["seed: study has 42, this run 7"]


def test_a_task_whose_fp16_steps_are_slow_on_the_cpu_is_said_before_the_study_starts(monkeypatch):
    """The probe's fp16 and fp32 steps (search.tasks.StepCost): fp16 many times slower and a long trial is
    said, with the estimate; a fast task, a GPU run, or a probe that did not time fp32 says nothing."""
    import search.tasks
    from search.study._plan import _cost_warnings
    from search.study._workers import WorkerSpec
    from search.tasks import StepCost

    cpu, gpu = [WorkerSpec(0, 1, "cpu", 1)], [WorkerSpec(0, 1, "cuda:0", 1)]
    costs = iter(
        [StepCost(29.7, 0.28), StepCost(29.7, 0.28), StepCost(0.2, 0.01), StepCost(0.05, float("nan"))]
    )
    monkeypatch.setattr(search.tasks, "step_cost", lambda problem: next(costs))
    (said,) = _cost_warnings(object(), cpu, 20)
    assert said.startswith(
        "one step of this task took 30 s under fp16 autocast against 0.28 s in fp32 on this CPU (106x"
    )
    assert "a trial of 20 steps will take about 10 min" in said
    assert _cost_warnings(object(), gpu, 20) == []
    assert _cost_warnings(object(), cpu, 20) == []  # 20x slower, but a trial of 4 s
    assert _cost_warnings(object(), cpu, 20) == []  # fp16 fast: fp32 not timed


def test_the_probe_times_its_step_on_the_threads_the_trials_use(tmp_path):
    """The cost warning multiplies the probe's step by a trial's steps: the probe once ran on torch's default
    threads (one a core), which contend where processes share the cores, and its estimate was 20x a trial's
    time. This process runs one thread (conftest); the trials, with --threads 3, three: so must the probe."""
    from tasks_for_tests import THREADS_SEEN

    THREADS_SEEN.clear()
    proc = run_cli(
        [
            "--task",
            "tasks_for_tests:thread_counting",
            "--trials",
            "1",
            "--epochs",
            "2",
            "--threads",
            "3",
            "--quiet",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    # The probe's fp16 step and its evaluation, then the trial's 2 steps and its evaluations.
    assert len(THREADS_SEEN) > 2 and set(THREADS_SEEN) == {3}, THREADS_SEEN

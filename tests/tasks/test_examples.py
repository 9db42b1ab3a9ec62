"""examples/: a user task written against the public interface, run by the real command."""

from __future__ import annotations

import ast

import optuna
from optuna.trial import TrialState

from examples.noisy_regression import build
from search.core import ROUNDING_OF
from search.training import batch_plan

from conftest import ROOT, load, run_cli


def test_the_example_uses_only_the_public_interface():
    tree = ast.parse((ROOT / "examples" / "noisy_regression.py").read_text())
    imported = [
        (node.module, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    ]
    ours = [(module, names) for module, names in imported if module and module.startswith("search")]
    assert ours == [("search", ["Problem"])]
    import search

    assert "Problem" in search.__all__


def test_the_example_is_deterministic_in_its_seed():
    assert build(3).fingerprint() == build(3).fingerprint() != build(4).fingerprint()
    problem = build(3)
    assert len(batch_plan(problem, problem.epochs)) == 32  # 4 epochs x 16 batches / 2 accumulated


def test_the_command_runs_the_example(tmp_path):
    task = "examples.noisy_regression:build"
    # 6 trials: the 5 seed baselines and one sampled trial, all on the same data, weights and batches.
    proc = run_cli(["--task", task, "--trials", "6", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Issue 15: the default study name is readable (the module's name), the path is recorded.
    assert "Study 'noisy_regression'" in proc.stdout
    study = load(tmp_path, "noisy_regression")
    trials = study.get_trials()
    # Past the 6, a run may train the answer's line rounded (when the answer is a change).
    assert len([t for t in trials if ROUNDING_OF not in t.user_attrs]) == 6
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert all(len(t.user_attrs["loss_curve"]) == 32 == len(t.intermediate_values) for t in trials)
    assert len({t.user_attrs["loss_curve"][0] for t in trials}) == 1  # Same data, weights, batches.
    assert study.user_attrs["epochs"] == 4 and study.user_attrs["task"] == task
    confirm = run_cli(
        ["--study-name", "noisy_regression", "--top", "1", "--seeds", "2", "--no-corners", "--quiet"],
        tmp_path,
        module="search.confirm",
    )
    assert confirm.returncode == 0, confirm.stderr


def test_a_study_under_the_old_default_name_is_resumed(tmp_path):
    # Before issue 15 a user task's study was named after its import path. Rerunning the same
    # command must go on with that study, not start a second one beside it.
    task = "examples.noisy_regression:build"
    # The 5 seed baselines under the old name; the rerun adds one trial to that study.
    first = run_cli(["--task", task, "--study-name", task, "--trials", "5", "--quiet"], tmp_path)
    assert first.returncode == 0, first.stderr
    again = run_cli(["--task", task, "--trials", "6", "--quiet"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"Study '{task}'" in again.stdout and again.stderr == ""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == [task]
    complete = load(tmp_path, task).get_trials(states=(TrialState.COMPLETE,))
    assert len([t for t in complete if ROUNDING_OF not in t.user_attrs]) == 6

"""examples/: a user task written against the public interface, run by the real command."""

from __future__ import annotations

import ast

import optuna
from optuna.trial import TrialState

from examples.noisy_regression import build
from search.trainer import batch_plan

from conftest import ROOT, load, run_cli


def test_the_example_uses_only_the_public_interface():
    tree = ast.parse((ROOT / "examples" / "noisy_regression.py").read_text())
    imported = [
        (node.module, [a.name for a in node.names]) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
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
    name = "examples.noisy_regression:build"
    proc = run_cli(["--task", name, "--trials", "8", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = load(tmp_path, name).get_trials()
    assert len(trials) == 8 and all(t.state == TrialState.COMPLETE for t in trials)
    assert all(len(t.user_attrs["loss_curve"]) == 32 == len(t.intermediate_values) for t in trials)
    assert len({t.user_attrs["loss_curve"][0] for t in trials}) == 1  # Same data, weights, batches.
    assert optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name=name).user_attrs["epochs"] == 4

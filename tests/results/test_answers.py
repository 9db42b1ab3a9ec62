"""The form of a rule's answer is chosen in one place, and everything above the rules asks it."""

from __future__ import annotations

import ast

from search.results import FRAMEWORK_FORM, FRAMEWORKS, GRADSCALER_FORM, answer_form
from search.scalers import RULES, TORCH

from conftest import ROOT

_SETTING_TYPES = {"ScalerConfig", "RuleSetting"}


def _asks_which_rule(node: ast.AST) -> bool:
    """Whether a node asks which rule a study runs instead of asking the rule: its replay flag, a comparison
    with GradScaler's name, or the type of its setting."""
    if isinstance(node, ast.Attribute):
        return node.attr == "replays"
    if isinstance(node, ast.Compare):  # scaler == TORCH, settings.run.scaler != "torch", ...
        sides = [node.left, *node.comparators]
        return any(isinstance(side, ast.Name) and side.id == "TORCH" for side in sides) or (
            any(isinstance(side, ast.Constant) and side.value == "torch" for side in sides)
            and any("scaler" in ast.unparse(side) for side in sides)
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
        return any(isinstance(n, ast.Name) and n.id in _SETTING_TYPES for n in ast.walk(node.args[1]))
    return False


_ASKING = {"search/results/_answers.py": 1}  # answer_form, the one place


def test_each_rule_has_its_form():
    assert answer_form(TORCH) is GRADSCALER_FORM
    assert all(answer_form(name) is FRAMEWORK_FORM for name in RULES if name != TORCH)
    assert GRADSCALER_FORM.paste_forms == tuple(FRAMEWORKS) and FRAMEWORK_FORM.paste_forms == ()


def test_only_the_answer_form_asks_which_rule_a_study_runs():
    """Outside search/scalers/, the torch-vs-framework choice is made by answer_form alone."""
    asking = {}
    for path in sorted((ROOT / "search").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("search/scalers/"):
            continue
        found = sum(_asks_which_rule(node) for node in ast.walk(ast.parse(path.read_text())))
        if found:
            asking[relative] = found
    assert asking == _ASKING

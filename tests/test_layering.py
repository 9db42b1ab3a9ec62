"""Commands on top, a library below: the import graph, read with ``ast``, and the linter."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

COMMANDS = {"search.optimize", "search.confirm", "search.report", "search.transfer", "search.dashboard"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports (``from a import b`` counts ``a`` and ``a.b``), at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _sources(folder: str) -> list[pathlib.Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_no_library_module_or_bench_script_imports_a_command():
    offenders = []
    for path in _sources("search") + _sources("bench"):
        name = _module_name(path)
        if _command_of(name) or name == "search":  # the package's lazy API names publish etc., not commands
            continue
        bad = sorted(m for m in _imports(path) if _command_of(m))
        if bad:
            offenders.append(f"{name} imports {', '.join(bad)}")
    assert not offenders, "library modules must not import commands:\n" + "\n".join(offenders)


def _command_of(module: str) -> str | None:
    """The command ``module`` belongs to: a command module, or a module inside a command's package."""
    return next((c for c in COMMANDS if module == c or module.startswith(c + ".")), None)


def test_no_command_imports_another_command():
    offenders = []
    for path in _sources("search"):
        name = _module_name(path)
        own = _command_of(name)
        if own:
            bad = sorted(m for m in _imports(path) if _command_of(m) not in (None, own))
            if bad:
                offenders.append(f"{name} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)


def test_the_package_api_names_no_command_eagerly():
    tree = ast.parse((ROOT / "search" / "__init__.py").read_text())
    eager = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not eager & COMMANDS, eager & COMMANDS


def test_only_the_record_module_spells_trial_attr_keys():
    """One module owns the trial record: the others read and write attrs through its names."""
    import re

    from search import record

    keys = {v for k, v in vars(record).items() if k.isupper() and isinstance(v, str)} | set(record.RUN_ATTRS)
    pattern = re.compile(r"""user_attrs(?:\.get\(|\[)\s*["']([a-z_0-9]+)["']""")
    offenders = []
    for path in _sources("search"):
        if path.name == "record.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(ROOT)} spells {k!r}" for k in pattern.findall(text) if k in keys]
        if '"seed-1"' in text:
            offenders.append(f"{path.relative_to(ROOT)} spells 'seed-1' (record.DEFAULT_BASELINE)")
    assert not offenders, "\n".join(offenders)


def test_ruff_is_clean():
    """Unused imports and names, undefined names, sorted imports (pyproject's [tool.ruff.lint])."""
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.fail("ruff is not installed; set-up step: pip install -e '.[dev]'")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "search", "bench", "tests", "examples"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

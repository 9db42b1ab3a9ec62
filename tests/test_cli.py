"""search.cli: what every command shares (usage names, help)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import cli_env, run_cli

COMMANDS = ("optimize", "transfer", "report", "confirm", "dashboard")


@pytest.mark.parametrize("command", COMMANDS)
def test_console_scripts_print_their_own_name(command, tmp_path):
    script = shutil.which(f"search-{command}")
    if script is None:
        pytest.fail(f"search-{command} is not installed; set-up step: pip install -e '.[dev]'")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, env=cli_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: search-{command} "), proc.stdout[:200]
    module = run_cli(["--help"], tmp_path, module=f"search.{command}")
    assert module.stdout.startswith(f"usage: python -m search.{command} ")
    assert list(tmp_path.iterdir()) == []


def test_optimize_help_names_its_values_and_the_built_in_tasks(tmp_path):
    text = run_cli(["--help"], tmp_path).stdout
    for flag in ("--timeout SECONDS", "--trial-timeout SECONDS", "--max-failed-trials K", "--trials N", "--seed N"):
        assert flag in text, flag
    assert "seed-mlp, deep-mlp, deep-mlp-large" in text.replace("\n", " ").replace("  ", " ")


def test_bench_help_is_plain_text_with_defaults(tmp_path):
    text = run_cli(["--help"], tmp_path, module="bench").stdout
    assert "``" not in text and "(default: 40)" in text and "(default: P1,P2,P3,P4,S)" in text

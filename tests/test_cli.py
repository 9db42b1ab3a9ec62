"""search.cli: what every command shares (usage names, help)."""

from __future__ import annotations

import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from search.startup import command_being_started

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
    assert "``" not in text and "(default: 40)" in text and "(default: P1,P2,P3,P4,P5,S)" in text


# -- an interrupt while a command starts (issue 15) -------------------------------------------

START_ARGS = {  # Each would write something if it got that far.
    "optimize": ["--trials", "1"],
    "transfer": ["--from", "sqlite:///a.db", "--to", "sqlite:///b.db"],
    "report": ["--out", "r.html"],
    "confirm": [],
    "dashboard": [],
}


def _signal_while_torch_imports(command: str, sig: signal.Signals, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """Starts ``python -m search.COMMAND`` and signals it once torch's shared library is mapped.

    torch's native library is loaded early in ``import torch``, which then imports Python modules for
    a second or so, and optuna and the rest follow: the signal lands in the middle of the imports,
    whatever the machine's speed (a fixed delay would not, on a loaded 2-core machine).
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", f"search.{command}", *START_ARGS[command]],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    maps = pathlib.Path(f"/proc/{proc.pid}/maps")
    deadline = time.time() + 60
    while time.time() < deadline and "libtorch" not in maps.read_text():
        time.sleep(0.002)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_while_importing_is_one_line_and_exit_130(command, tmp_path):
    proc = _signal_while_torch_imports(command, signal.SIGINT, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == f"search.{command}: interrupted while starting (SIGINT); nothing was written\n"
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_sigterm_while_importing_is_one_line_and_exit_143(tmp_path):
    proc = _signal_while_torch_imports("optimize", signal.SIGTERM, tmp_path)
    assert proc.returncode == 143 and proc.stderr.strip().endswith("(SIGTERM); nothing was written")


def test_only_the_commands_are_guarded_not_a_script_that_imports_search():
    python = sys.executable
    assert command_being_started([python, "-m", "search.optimize", "--trials", "3"], "-m") == "search.optimize"
    assert command_being_started([python, "-W", "ignore", "-msearch.report"], "-m") == "search.report"
    assert command_being_started([python, "/usr/bin/search-confirm"], "/usr/bin/search-confirm") == "search.confirm"
    assert command_being_started([python, "train.py", "-m", "search.optimize"], "train.py") is None
    assert command_being_started([python, "-m", "mytool"], "/x/mytool/__main__.py") is None
    assert command_being_started([python, "-c", "import search"], "-c") is None

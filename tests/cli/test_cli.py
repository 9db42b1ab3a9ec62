"""search.cli._parsing: what every command shares (usage names, help)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import optuna
import pytest

from search.cli import command_being_started

from conftest import cli_env, run_cli, run_process

COMMANDS = ("optimize", "transfer", "report", "confirm", "dashboard", "diagnose")


@pytest.mark.parametrize("command", COMMANDS)
def test_console_scripts_print_their_own_name(command, tmp_path):
    script = shutil.which(f"search-{command}")
    if script is None:
        pytest.fail(f"search-{command} is not installed; set-up step: pip install -e '.[dev]'")
    proc = subprocess.run(
        [script, "--help"], capture_output=True, text=True, env=cli_env(), cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: search-{command} "), proc.stdout[:200]
    module = run_cli(["--help"], tmp_path, module=f"search.{command}")
    assert module.stdout.startswith(f"usage: python -m search.{command} ")
    assert list(tmp_path.iterdir()) == []


def test_optimize_help_names_its_values_and_the_built_in_tasks(tmp_path):
    text = run_cli(["--help"], tmp_path).stdout
    for flag in (
        "--timeout SECONDS",
        "--trial-timeout SECONDS",
        "--max-failed-trials K",
        "--trials N",
        "--seed N",
    ):
        assert flag in text, flag
    assert "seed-mlp, deep-mlp, deep-mlp-large" in text.replace("\n", " ").replace("  ", " ")


def test_bench_help_is_plain_text_with_defaults(tmp_path):
    text = run_process(["--help"], tmp_path, module="bench").stdout
    assert "``" not in text and "(default: 40)" in text and "(default: P1,P2,P3,P4,P5,S)" in text


# -- an interrupt while a command starts (issue 15) -------------------------------------------

START_ARGS = {  # Each would write something if it got that far.
    "transfer": ["--from", "sqlite:///a.db", "--to", "sqlite:///b.db"],
    "report": ["--out", "r.html"],
    "confirm": [],
    "dashboard": [],
}


def _signal_while_importing(
    command: str, sig: signal.Signals, cwd: pathlib.Path
) -> subprocess.CompletedProcess:
    """Starts ``python -m search.COMMAND`` and signals it once SQLAlchemy's first shared library is mapped.

    Every command but optimize and diagnose imports SQLAlchemy (its storage URLs) and Optuna before its
    ``main`` runs, and neither is done for a tenth of a second or more after SQLAlchemy's first native module
    is loaded: the signal lands in the middle of the imports, whatever the machine's speed (a fixed delay
    would not, on a loaded 2-core machine). torch is no marker: the commands import it only when they train.
    (optimize imports them once its ``main`` runs, where a signal is recorded and the run stops cleanly: the
    test after these.)
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
    while time.time() < deadline and "sqlalchemy" not in maps.read_text():
        time.sleep(0.002)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# Those two import nothing heavy before their main runs: no import to cut.
@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("diagnose", "optimize")])
def test_ctrl_c_while_importing_is_one_line_and_exit_130(command, tmp_path):
    proc = _signal_while_importing(command, signal.SIGINT, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == f"search.{command}: interrupted while starting (SIGINT); nothing was written\n"
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_sigterm_while_importing_is_one_line_and_exit_143(tmp_path):
    proc = _signal_while_importing("confirm", signal.SIGTERM, tmp_path)
    assert proc.returncode == 143 and proc.stderr.strip().endswith("(SIGTERM); nothing was written")


@pytest.mark.parametrize("sig, workers", [(signal.SIGINT, 1), (signal.SIGTERM, 2)])
def test_a_signal_between_start_up_and_the_trial_loop_stops_the_run_with_one_line(tmp_path, sig, workers):
    """After main starts and before the trial loop, SIGINT once raised where Python ignored it (a weakref
    callback: the run went on and exited 0) and SIGTERM killed with no word. Now it is recorded and raised
    where the command can stop cleanly."""
    from tasks_for_tests import BUILDING_FLAG

    args = ["--task", "tasks_for_tests:slow_to_build", "--trials", "20", "--workers", str(workers), "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "search.optimize", *args],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not (tmp_path / BUILDING_FLAG).exists() and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert len(err.strip().splitlines()) == 1 and f"interrupted by {sig.name}" in err, err
    assert "Traceback" not in err and "Exception ignored" not in err
    url = f"sqlite:///{tmp_path / 'study.db'}"
    (name,) = optuna.get_all_study_names(url)
    trials = optuna.load_study(storage=url, study_name=name).trials
    assert not any(t.state.name in ("RUNNING", "COMPLETE") for t in trials)  # Stopped before any trial ran.


def test_recorded_interrupts_are_raised_where_the_command_handles_them():
    from search.core import Interrupted, interrupts_as_exceptions, record_interrupts, take_pending

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        record_interrupts()
        os.kill(os.getpid(), signal.SIGTERM)  # Recorded only: neither fatal nor raised here.
        time.sleep(0.05)
        with pytest.raises(Interrupted) as raised:
            with interrupts_as_exceptions():
                pytest.fail("the block must not run with a signal pending")
        assert raised.value.signum == signal.SIGTERM and take_pending() is None
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert take_pending() == signal.SIGINT and take_pending() is None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_only_the_commands_are_guarded_not_a_script_that_imports_search():
    python = sys.executable
    assert (
        command_being_started([python, "-m", "search.optimize", "--trials", "3"], "-m") == "search.optimize"
    )
    assert command_being_started([python, "-W", "ignore", "-msearch.report"], "-m") == "search.report"
    assert (
        command_being_started([python, "/usr/bin/search-confirm"], "/usr/bin/search-confirm")
        == "search.confirm"
    )
    assert command_being_started([python, "train.py", "-m", "search.optimize"], "train.py") is None
    assert command_being_started([python, "-m", "mytool"], "/x/mytool/__main__.py") is None
    assert command_being_started([python, "-c", "import search"], "-c") is None


# -- light commands: help and bad input never import torch (about 2 s of a 2.5 s start) ----------

# diagnose, then optimize before a storage: neither imports Optuna, which every case from there does
LIGHT_EXITS = [
    ("diagnose", ["--help"], 0),
    ("diagnose", ["--log", "missing.log"], 2),
    ("diagnose", ["--init-scale", "0"], 2),
    ("diagnose", ["--scaler", "deepspeed", "--knob", "window=3"], 2),
    ("diagnose", ["--task", "no-such-task"], 2),
    ("optimize", ["--help"], 0),
    ("optimize", ["--no-such-flag"], 2),
    ("optimize", ["--trials", "-3"], 2),
    ("optimize", ["--steps", "0"], 2),
    ("optimize", ["--config", "malformed.toml"], 2),
    ("optimize", ["--config", "range.toml"], 2),
    ("optimize", ["--task", "no-such-task"], 2),
    ("optimize", ["--storage", "sqlite:///not-a-db.txt"], 2),  # the first case that reads a storage
    ("optimize", ["--storage", "sqlite:////no/such/dir/s.db"], 2),
    ("report", ["--help"], 0),
    ("report", ["--storage", "sqlite:///missing.db"], 2),
    ("transfer", ["--help"], 0),
    ("transfer", ["--from", "sqlite:///missing.db", "--to", "sqlite:///b.db"], 2),
    ("dashboard", ["--help"], 0),
    ("dashboard", ["--port", "0"], 2),
    ("confirm", ["--help"], 0),
    ("confirm", ["--top", "x"], 2),
]


FIRST_STORAGE = next(i for i, (command, args, _code) in enumerate(LIGHT_EXITS) if "--storage" in args)

# Every case in one fresh interpreter, one after another, each in a folder of its own: torch found in
# sys.modules after a case and not before is that case's import (one start-up, not sixteen).
_LIGHT_RUNNER = """
import contextlib, importlib, io, json, os, sys
results = []
for folder, command, args in json.loads(sys.argv[1]):
    os.chdir(folder)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = importlib.import_module("search." + command).main(args)
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                    "optuna": "optuna" in sys.modules, "torch": "torch" in sys.modules})
print(json.dumps(results))
"""


def test_help_and_bad_input_never_import_torch(tmp_path):
    cases = []
    for i, (command, args, _code) in enumerate(LIGHT_EXITS):
        folder = tmp_path / f"case-{i}"
        folder.mkdir()
        (folder / "malformed.toml").write_text("[run\n")
        (folder / "range.toml").write_text("[space.init_scale]\nlow = 1e6\nhigh = 1.0\n")
        (folder / "not-a-db.txt").write_text("hello")
        cases.append((str(folder), command, args))
    before = {folder: sorted(pathlib.Path(folder).iterdir()) for folder, _, _ in cases}
    proc = subprocess.run(
        [sys.executable, "-c", _LIGHT_RUNNER, json.dumps(cases)],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)
    for i, ((folder, command, args), (_, _, code), result) in enumerate(
        zip(cases, LIGHT_EXITS, results, strict=True)
    ):
        case = f"search.{command} {' '.join(args)}"
        assert result["code"] == code, (case, result["stderr"])
        # Optuna waits for a storage (sys.modules accumulates: from the first case that reads one, every case
        # has
        # it); that it is there from then on shows the check sees real imports.
        assert result["optuna"] == (i >= FIRST_STORAGE), case
        assert not result["torch"], f"{case} imported torch"
        assert len(result["stderr"].splitlines()) == (0 if code == 0 else 1), (case, result["stderr"])
        assert sorted(pathlib.Path(folder).iterdir()) == before[folder], case


def _imports_of(args: list[str], cwd: pathlib.Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Runs ``python -X importtime -m ARGS``: the process and the modules it imported by an import statement
    (importtime's list, which leaves out the package's own lazy imports, made by ``importlib``, but not what
    those modules import in turn: Optuna, torch, scikit-learn are there whenever they are imported)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }
    return proc, names


def test_the_reports_help_imports_neither_optuna_nor_scikit_learn(tmp_path):
    """--help needs no study: neither Optuna, plotly, scikit-learn (which optuna.importance loads) nor torch.
    """
    proc, names = _imports_of(["search.report", "--help"], tmp_path)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]
    assert "argparse" in names  # the list is real: the parser's module was imported
    assert not sorted(n for n in names if n.split(".")[0] in ("sklearn", "optuna", "plotly", "torch"))


def test_trials_zero_on_a_new_sqlite_file_ends_before_the_task_and_writes_nothing(tmp_path):
    """Nothing to do is known from the file's absence once the flags are checked: a bad --device is still bad
    input (exit 2); a good one ends before the task is built (its module never imported), writing nothing."""
    proc, names = _imports_of(["search.optimize", "--trials", "0", "--task", "seed-mlp"], tmp_path)
    assert proc.returncode == 0 and "study.db does not exist and --trials is 0: nothing to do" in proc.stderr
    assert "torch" in names  # the list is real: the device was resolved (torch)
    # No trial's training was reached (a run that trains one imports the judging of its run, search.training's
    # penalty, by an import statement), and nothing was made.
    assert "search.training._penalty" not in names and list(tmp_path.iterdir()) == []
    bad = run_cli(["--trials", "0", "--device", "cuda:7"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--device" in bad.stderr, bad.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_signal_whose_raise_is_lost_in_a_del_is_kept_silently_and_raised_again(capsys):
    """A Ctrl-C during search.diagnose's training once ran on for a minute, and printed "Exception ignored
    in: <function _get_module_lock...>" above its one line: its Interrupted was raised inside a ``__del__`` or
    an import's weakref callback, where Python prints and drops it. Now such a raise prints nothing and its
    signal is kept, for the diagnosis observer's per-step ``raise_pending`` (and the commands' after the
    block); outside the block Python's own hook is back."""
    import signal
    import sys

    from search.core import Interrupted, interrupts_as_exceptions, raise_pending

    class Finalised:
        def __del__(self) -> None:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # as if the signal landed here

    hook = sys.unraisablehook
    for first_only in (True, False):
        with interrupts_as_exceptions(first_only=first_only):
            Finalised()  # dropped at once: its __del__ raises where Python cannot propagate it
            with pytest.raises(Interrupted) as raised:
                raise_pending()
            assert raised.value.signum == signal.SIGINT
            raise_pending()  # taken once: nothing left
        assert sys.unraisablehook is hook
    assert capsys.readouterr().err == ""


def test_a_report_draws_its_importances_without_loading_scikit_learn(tmp_path):
    """PED-ANOVA needs no scikit-learn, which optuna.importance would load for its other evaluators (2 s of a
    report's 3): the report of a finished study draws the importances and scikit-learn stays unloaded."""
    made = run_cli(["--trials", "8", "--epochs", "4", "--quiet"], tmp_path)
    assert made.returncode == 0, made.stderr
    proc, names = _imports_of(["search.report", "--out", "r.html"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "optuna.importance._ped_anova" in names  # the list is real: the evaluator was imported
    assert (
        "sklearn.utils" not in names and "sklearn.base" not in names
    )  # what importing scikit-learn loads first
    assert 'id="figure-importances"' in (tmp_path / "r.html").read_text()

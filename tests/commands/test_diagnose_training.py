"""``search.diagnose`` on a task: what it prints, its JSON and page, and bad input (one line, exit 2, nothing
written)."""

from __future__ import annotations

import json
import math
import signal
import time

import pytest

from search.diagnose import main as diagnose_main

from conftest import run_cli, start_cli


def test_deep_mlp_reads_as_an_underflow_in_text_json_and_page(tmp_path):
    proc = run_cli(
        ["--task", "deep-mlp", "--steps", "48", "--json", "d.json", "--html", "d.html"],
        tmp_path,
        module="search.diagnose",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(
        "Diagnosis of deep-mlp (seed 42, 48 steps, cpu), GradScaler's rule: init_scale 2^16, growth_factor 2"
    )
    assert "  verdict: underflow\n" in out and "start at init_scale 2^20" in out
    assert "  skipped steps: 0 of 48\n" in out
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["verdict"] == "underflow" and data["suggested_init_scale"] == 2.0**20
    assert data["settings"] == {
        "init_scale": 65536.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    assert (
        set(data["runs"]) == {"fp16", "fp32", "bf16"} and data["skipped_steps"] == 0 and data["skips"] == []
    )
    fp16 = data["runs"]["fp16"]
    assert fp16["failure"] == "underflow" and len(fp16["scales"]) == 48
    # The growth window, as printed, in the JSON and on the page: one and the same claim.
    window = data["growth_window"]
    assert window[1] is None and window[0] == 48 and "growth_interval >= 48" in out
    assert len(data["runs"]["fp32"]["step_largest"]) == 48
    page = (tmp_path / "d.html").read_text()
    assert "<h2>underflow</h2>" in page and page.count("<svg") == 2 and "0.weight" in page
    assert "<p>Growth: " in page and "growth_interval &gt;= 48." in page
    # Two outputs of one diagnosis agree: the page holds the printed lines as they were printed.
    assert "verdict: underflow" in page and proc.stderr.count("\n") == 1  # one progress line


def test_every_skipped_step_is_listed_with_what_overflowed(tmp_path):
    proc = run_cli(
        ["--task", "seed-mlp", "--growth-interval", "1", "--json", "d.json"],
        tmp_path,
        module="search.diagnose",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["verdict"] == "chronic-skipping" and data["skipped_steps"] == len(data["skips"]) > 0
    skipped = [i for i, s in enumerate(data["runs"]["fp16"]["skipped"]) if s]
    assert [s["step"] for s in data["skips"]] == skipped
    for skip in data["skips"]:
        assert skip["parameters"] and skip["forward_layer"] is None
    for skip in data["skips"][:12]:  # The text lists twelve, then counts the rest.
        assert f"    step {skip['step']} (scale 2^" in proc.stdout
    assert f"    ... {len(skipped) - 12} more (--json lists every one)\n" in proc.stdout
    assert math.isclose(data["expected_skip_rate"], 0.5)


def test_a_frameworks_rule_is_diagnosed_with_its_own_knobs(tmp_path):
    proc = run_cli(
        ["--task", "sum-outliers", "--scaler", "deepspeed", "--knob", "hysteresis=3", "--json", "d.json"],
        tmp_path,
        module="search.diagnose",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["scaler"] == "deepspeed" and data["settings"]["hysteresis"] == 3
    assert data["verdict"] == "scale-collapse" and data["suggested_init_scale"] is None
    assert "DeepSpeed's rule: initial_scale_power 16, loss_scale_window 1000, hysteresis 3" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        # 0 would train the task's default length, a whole run the user did not ask for.
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["--epochs", "-2"], "--epochs must be >= 1, got -2"),
        (["--init-scale", "0"], "--init-scale must be > 0 (GradScaler's rule), got 0"),
        (["--init-scale", "inf"], "--init-scale must be > 0 (GradScaler's rule), got inf"),
        (["--growth-factor", "1"], "--growth-factor must be > 1"),
        (["--backoff-factor", "1.5"], "--backoff-factor must be in (0, 1)"),
        (["--growth-interval", "0"], "--growth-interval must be a whole number >= 1"),
        (
            ["--knob", "hysteresis=2"],
            "GradScaler's settings are init_scale, growth_factor, backoff_factor, growth_interval",
        ),
        (["--scaler", "deepspeed", "--knob", "window=3"], "DeepSpeed's settings are initial_scale_power"),
        (["--scaler", "deepspeed", "--knob", "hysteresis=0"], "hysteresis must be a whole number >= 1"),
        (["--scaler", "megatron", "--init-scale", "8"], "--init-scale is GradScaler's"),
        (["--scaler", "nope"], "scaler"),
        (["--task", "no-such-task"], "no-such-task"),
        (["--log", "x.log", "--task", "seed-mlp"], "--task is for a training diagnosis"),
        (["--html", "no/such/dir/d.html"], "--html no/such/dir/d.html: directory"),
        (["--device", "cuda"], "CUDA is not available"),
        (["--log", "x.log", "--storage", "sqlite:///s.db"], "--storage is for a training diagnosis"),
        (["--storage", "sqlite:///no/such/dir/s.db"], "cannot create SQLite storage no/such/dir/s.db"),
        # A server that is not there: refused before training, its password masked.
        (["--storage", "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/x"], "postgres:***@127.0.0.1:1/x"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, args, message):
    # In this process: a process's start is what tests/cli/test_cli.py checks (no torch, no traceback).
    monkeypatch.chdir(tmp_path)
    assert diagnose_main([*args, "--json", "d.json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("search.diagnose: error: ") and err.count("\n") == 1, err
    assert message in err and "hunter2" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_it_trains_is_one_line_exit_130_and_records_and_writes_nothing(tmp_path):
    """The command records signals from its start; it used to train on through a Ctrl-C, record the diagnosis
    and exit 0. A real process: the signal is the point."""
    args = ["--steps", "50000", "--storage", "sqlite:///s.db", "--json", "d.json"]
    proc = start_cli(args, tmp_path, module="search.diagnose")
    # Printed as the three runs begin: 150000 steps, a minute and more (5000 may end first on a busy machine).
    note = proc.stderr.readline()
    assert note.startswith("search.diagnose: training 50000 steps three times"), note
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and out == ""
    assert err == "search.diagnose: error: interrupted (SIGINT)\n"
    assert list(tmp_path.iterdir()) == []  # no study.db, no study, no JSON


def test_the_flags_help_shows_gradscalers_own_defaults():
    """--help writes PyTorch's defaults as text (no import of the rules at start-up): they are GradScaler's
    knobs'."""
    from search.diagnose import _TORCH_FLAGS
    from search.scalers import GRADSCALER

    for flag, kind, shown in _TORCH_FLAGS:
        knob = GRADSCALER.knob(flag[2:].replace("-", "_"))
        assert kind(shown) == knob.default, flag

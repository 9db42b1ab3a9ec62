"""``search.optimize --scaler deepspeed|megatron|fairseq``: a study of a framework's own rule, run on the CPU.

Its baselines are the framework's defaults, its params the framework's own knobs, and every trial's skipped
steps and scale curve equal a plain AMP loop (tests/plain_loop.py) whose scale is moved by the framework's
own class (DeepSpeed 0.19.8's DynamicLossScaler) or by the transcriptions in
tests/scalers/test_megatron_fairseq.py (Megatron-LM eedfe533, fairseq f591cc94). The answer is the
framework's own config form.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
from optuna.trial import TrialState

from search.core import BASELINE, OVERFLOW_STEPS, SCALE_CURVE, setting_of
from search.optimize import main as optimize_main
from search.results import idle_settings, param_values
from search.scalers import RULES
from search.storage import settings_of
from search.tasks.seed_mlp import build

from conftest import load, run_cli
from frameworks import deepspeed_scaler
from plain_loop import plain_rule_run
from test_megatron_fairseq import fairseq_scales, megatron_scales

STEPS = 30


def deepspeed_next(values):
    """DeepSpeed's own DynamicLossScaler, as ZeRO builds it from the fp16 block (None where it ends the run).
    """
    theirs = deepspeed_scaler(*(values[name] for name in RULES["deepspeed"].names))

    def step(overflow):
        try:
            theirs.update_scale(overflow)
        except Exception:  # DeepSpeed raises a bare Exception at the minimum.
            return None
        return float(theirs.cur_scale)  # DeepSpeed keeps 2**power as an int; GradScaler takes a float.

    return float(theirs.cur_scale), step


def megatron_next(values):
    seen: list[bool] = []
    args = (
        values["initial_loss_scale"],
        values["min_loss_scale"],
        values["loss_scale_window"],
        values["hysteresis"],
        2.0,
        0.5,
    )

    def step(overflow):
        seen.append(overflow)
        return megatron_scales(seen, *args)[-1]

    return values["initial_loss_scale"], step


def fairseq_next(values):
    seen: list[bool] = []
    threshold = values["threshold_loss_scale"] or None

    def step(overflow):
        seen.append(overflow)
        out, ended_at, _last = fairseq_scales(
            seen,
            float(values["fp16_init_scale"]),
            values["fp16_scale_window"],
            values["fp16_scale_tolerance"],
            values["min_loss_scale"],
            threshold,
        )
        return None if ended_at is not None else out[-1]

    return float(values["fp16_init_scale"]), step


REFERENCES = {"deepspeed": deepspeed_next, "megatron": megatron_next, "fairseq": fairseq_next}


@pytest.mark.parametrize("scaler", ["deepspeed", "megatron", "fairseq"])
def test_a_framework_study_measures_its_rule_as_the_framework_does(tmp_path, monkeypatch, scaler):
    # The sampler's seed mixes in host and pid; fixed here, so the sampled points (one far past the edge) are
    # too.
    monkeypatch.setattr("search.study._run_parts.process_token", lambda: "tests:1")
    args = ["--scaler", scaler, "--trials", "7", "--epochs", str(STEPS), "--quiet", "--best-out", "best.json"]
    if (
        scaler == "fairseq"
    ):  # Its default 128 never overflows seed-mlp; start the sampled ones up to 2^30 (edge 2^19.4).
        (tmp_path / "fairseq.toml").write_text(
            "[space.fairseq.fp16_init_scale]\nlow = 64\nhigh = 1073741824\nlog = true\n"
        )
        args += ["--config", "fairseq.toml"]
    run = run_cli(args, tmp_path)
    assert run.returncode == 0, run.stderr
    study = load(tmp_path)
    rule = RULES[scaler]
    assert study.user_attrs["scaler"] == scaler and set(study.user_attrs["space"]) == {
        k.name for k in rule.knobs
    }
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 7
    baselines = {t.user_attrs[BASELINE]: t for t in trials if BASELINE in t.user_attrs}
    assert sorted(baselines) == sorted(tag for tag, _ in rule.baselines)
    space = settings_of(study).space
    for tag, values in rule.baselines:
        assert dict(setting_of(baselines[tag].params, space, scaler).values) == dict(values)
    problem = build(42)
    overflowed = 0
    for trial in trials:
        values = dict(setting_of(trial.params, space, scaler).values)
        initial, next_scale = REFERENCES[scaler](values)
        scales, skipped, ended = plain_rule_run(problem, initial, next_scale, STEPS)
        assert trial.user_attrs[SCALE_CURVE] == scales, (trial.number, values)
        assert trial.user_attrs[OVERFLOW_STEPS] == [i for i, s in enumerate(skipped) if s]
        assert trial.user_attrs["skipped_steps"] == sum(skipped)
        assert (trial.user_attrs["failure"] == "ended_at_minimum") == ended
        overflowed += sum(skipped) > 0
        # The knobs the report calls idle in a run are those the framework's own loop never used in it.
        start = float(np.float32(initial))  # the scale the loop holds (float32), as the curve records it
        grew = any(b > a for a, b in zip([start, *scales], scales) if a is not None and b is not None)
        idle = idle_settings(trial, param_values(trial, space, scaler), {}, scaler)
        assert (set(rule.skips_with) <= idle) == (not any(skipped)), trial.number
        assert (rule.window_knob in idle) == (not grew), trial.number
    assert overflowed  # Some trial overflowed: the rule's backoff was compared, not only its growth.
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["scaler"] == scaler and best["verdict"] in ("keep-default", "change")
    block = rule.block(best["recommended"]["values"])
    assert best["paste"][scaler] == (
        json.loads(block) if scaler == "deepspeed" else block
    )  # DeepSpeed's is JSON
    assert "\n".join("      " + line for line in block.splitlines()) in run.stdout
    assert f"({rule.title}'s loss-scale rule)" in run.stdout
    assert (
        f"horizon: each trial ran {STEPS} optimizer steps, and {rule.title} grows the scale only after "
        in run.stdout
    )

    # search.report draws the study, and its answer is the summary's: the same verdict, values and block.
    for out in (["--out", "report.html"], ["--format", "json", "--out", "report.json"]):
        drawn = run_cli(["--storage", "sqlite:///study.db", *out], tmp_path, module="search.report")
        assert drawn.returncode == 0, drawn.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    rec = data["recommendation"]
    assert {k: rec[k] for k in ("verdict", "values", "source_trial", "changed")} == {
        k: best["recommended"][k] for k in ("verdict", "values", "source_trial", "changed")
    }
    assert [r["param"] for r in data["safe_ranges"]] == list(rule.names)
    page = (tmp_path / "report.html").read_text()
    assert f"<h1>{rule.title} search report: study " in page and html.escape(block) in page
    assert all(f"<th>{name}</th>" in page for name in rule.names)  # the baselines table: the rule's own knobs
    assert f"Horizon: each trial ran {STEPS} optimizer steps" in page


def test_the_deepspeed_block_is_what_deepspeeds_config_reads():
    """The fp16 block the answer prints, read by DeepSpeed's own config class, gives the scaler arguments the
    measured rule was built with (a non-default setting, every key)."""
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    rule = RULES["deepspeed"]
    values = {
        "initial_scale_power": 13,
        "loss_scale_window": 37,
        "hysteresis": 3,
        "consecutive_hysteresis": 1,
        "min_loss_scale": 3,
    }
    config = DeepSpeedFP16Config(**json.loads(rule.block(values))["fp16"])
    ours = rule.build(values)
    assert config.dynamic_loss_scale_args() == {
        "init_scale": ours.scale,
        "scale_window": ours.loss_scale_window,
        "delayed_shift": ours.hysteresis,
        "consecutive_hysteresis": ours.consecutive_hysteresis,
        "min_scale": ours.min_loss_scale,
    }
    defaults = DeepSpeedFP16Config(enabled=True)
    assert {k.name: k.default for k in rule.knobs} == {
        "initial_scale_power": defaults.initial_scale_power,
        "loss_scale_window": defaults.loss_scale_window,
        "hysteresis": defaults.hysteresis,
        "consecutive_hysteresis": defaults.consecutive_hysteresis,
        "min_loss_scale": defaults.min_loss_scale,
    }


def test_best_out_holds_deepspeeds_fp16_block_as_a_json_object(tmp_path):
    """--best-out's paste of a DeepSpeed study is the config's JSON as an object, not a string of JSON to
    decode again; DeepSpeed's own config class (which refuses unknown keys) reads its fp16 section into the
    measured rule.
    """
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    run = run_cli(
        ["--scaler", "deepspeed", "--trials", "2", "--quiet", "--best-out", "best.json"], tmp_path
    )  # its baselines
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "best.json") as f:
        best = json.load(f)
    assert best["verdict"] in ("keep-default", "change")
    ours = RULES["deepspeed"].build(best["recommended"]["values"])
    for paste in (best["paste"], best["recommended"]["paste"]):
        block = paste["deepspeed"]
        assert isinstance(block, dict) and set(block) == {"fp16"}, block
        config = DeepSpeedFP16Config(**block["fp16"])
        assert config.enabled and config.loss_scale == 0  # dynamic loss scaling
        assert config.dynamic_loss_scale_args() == {
            "init_scale": ours.scale,
            "scale_window": ours.loss_scale_window,
            "delayed_shift": ours.hysteresis,
            "consecutive_hysteresis": ours.consecutive_hysteresis,
            "min_scale": ours.min_loss_scale,
        }
    lines = run.stdout.splitlines()
    start = lines.index("    for DeepSpeed:") + 1
    printed = "\n".join(lines[start : lines.index("      }", start) + 1])
    assert json.loads(printed) == best["paste"]["deepspeed"]  # the block printed is the same config


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scaler", "apex"], "unknown scaler 'apex': use one of torch, deepspeed, megatron, fairseq"),
        (["--scaler", "megatron", "--amp-dtype", "bfloat16"], "--scaler megatron scales fp16 only"),
        (["--scaler", "fairseq", "--population", "4"], "population mode trains GradScaler's rule only"),
    ],
)
def test_a_scaler_it_cannot_run_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)  # In this process: tests/cli/test_cli.py checks a process's bad-input exit.
    assert optimize_main([*args, "--trials", "3"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_study_resumes_only_with_its_own_rule(tmp_path):
    assert (
        run_cli(["--scaler", "megatron", "--trials", "2", "--epochs", "5", "--quiet"], tmp_path).returncode
        == 0
    )
    again = run_cli(["--trials", "3", "--epochs", "5", "--quiet"], tmp_path)
    assert again.returncode == 2 and "scaler: study has megatron, this run torch" in again.stderr
    forced = run_cli(["--trials", "3", "--epochs", "5", "--quiet", "--allow-changed-settings"], tmp_path)
    assert forced.returncode == 2 and "not comparable" in forced.stderr
    assert len(load(tmp_path).trials) == 2


def test_a_default_the_config_fixes_away_is_left_out_and_the_answer_says_so(tmp_path):
    """With Megatron-LM's start scale and window fixed by the config, no trial is named megatron-default (it
    would train the fixed values under the default's name); the summary and the report say the default did not
    run, so the answer is not measured against it."""
    (tmp_path / "c.toml").write_text(
        "[space.megatron.initial_loss_scale]\nfixed = 1.156805\n[space.megatron.loss_scale_window]\nfixed"
        " = 2\n"
    )
    run = run_cli(
        ["--scaler", "megatron", "--config", "c.toml", "--trials", "4", "--epochs", "12", "--quiet"], tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "baseline megatron-default left out: the config fixes initial_loss_scale at 1.15681" in run.stderr
    trials = [t for t in load(tmp_path).trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 4 and not any(BASELINE in t.user_attrs for t in trials)
    space = settings_of(load(tmp_path)).space
    assert all(
        setting_of(t.params, space, "megatron").values["initial_loss_scale"] == 1.156805 for t in trials
    )
    said = "note: Megatron-LM's default (megatron-default) did not run in this study"
    assert said in run.stdout
    drawn = run_cli(["--storage", "sqlite:///study.db", "--out", "r.html"], tmp_path, module="search.report")
    assert drawn.returncode == 0 and said in html.unescape((tmp_path / "r.html").read_text())

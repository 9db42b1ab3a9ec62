"""``search.optimize --from-diagnosis``: a search that starts where a diagnosis says the gradients fit."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import optuna
import pytest

from search.core import DEFAULTS, ParamRange, distributions
from search.diagnosis import DiagnosisFileError, DiagnosisStart, narrowed_space, read_diagnosis
from search.optimize import main as optimize_main
from search.tasks.deep_mlp import build as build_deep

from conftest import run_cli
from plain_loop import plain_run


@pytest.fixture(scope="module")
def deep_mlp_diagnosis(tmp_path_factory):
    """A real diagnosis of deep-mlp at PyTorch's default, 32 steps: underflow, suggesting 2^20."""
    folder = tmp_path_factory.mktemp("diagnosis")
    proc = run_cli(
        ["--task", "deep-mlp", "--steps", "32", "--json", "d.json"], folder, module="search.diagnose"
    )
    assert proc.returncode == 0, proc.stderr
    return folder / "d.json"


def test_the_search_samples_around_the_suggestion_within_the_growth_window_and_records_the_diagnosis(
    tmp_path, deep_mlp_diagnosis
):
    data = json.loads(deep_mlp_diagnosis.read_text())
    suggested = data["suggested_init_scale"]
    # 32 steps: the needed scale is within an octave of the largest safe one, so growth need not act.
    assert data["verdict"] == "underflow" and suggested == 2.0**20 and data["growth_window"] == [32, None]
    proc = run_cli(
        [
            "--task",
            "deep-mlp",
            "--steps",
            "32",
            "--trials",
            "12",
            "--quiet",
            "--from-diagnosis",
            str(deep_mlp_diagnosis),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        f"note: from the diagnosis in {deep_mlp_diagnosis} (underflow): init_scale searched over 2^16..2^24, "
        "around the 2^20 it suggests; growth_interval over 32..2000 (the diagnosis: >= 32)"
        in proc.stderr
    )
    study = optuna.load_study(study_name="deep-mlp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    recorded = study.user_attrs["diagnosis"]
    assert recorded["verdict"] == "underflow" and recorded["suggested_init_scale"] == suggested
    assert (
        (recorded["low"], recorded["high"])
        == (2.0**16, 2.0**24)
        == tuple(study.user_attrs["space"]["init_scale"][k] for k in ("low", "high"))
    )
    assert (recorded["growth_low"], recorded["growth_high"], recorded["growth_window"]) == (
        32,
        2000,
        [32, None],
    )
    sampled = [t.params for t in study.trials if "baseline" not in t.user_attrs and t.params]
    assert sampled and all(
        2.0**16 <= p["init_scale"] <= 2.0**24 and 32 <= p["growth_interval"] for p in sampled
    )
    default = [t for t in study.trials if t.user_attrs.get("baseline") == "seed-1"]
    assert len(default) == 1 and default[0].params["init_scale"] == 2.0**16  # inside here, so measured
    # The setting the diagnosis suggests (a steady run: its start, the user's factors, growth_interval >= the
    # steps) is trained before any sampled trial, once, as baseline "diagnosis"; measured as the plain loop
    # does.
    assert data["suggested_setting"] == {
        "init_scale": 2.0**20,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    (first,) = [t for t in study.trials if t.user_attrs.get("baseline") == "diagnosis"]
    assert first.params == data["suggested_setting"] and first.state == optuna.trial.TrialState.COMPLETE
    assert first.number < min(t.number for t in study.trials if "baseline" not in t.user_attrs)
    plain = plain_run(build_deep(42), 2.0**20, 2.0, 0.5, 2000, 32)
    assert (
        first.user_attrs["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-5) and plain.failure == "none"
    )
    assert (
        "note: baseline diagnosis: the setting the diagnosis suggests, init_scale 2^20, growth_factor 2, "
        "backoff_factor 0.5, growth_interval 2000, trained before the sampled trials"
        in proc.stderr
    )
    again = run_cli(
        [
            "--task",
            "deep-mlp",
            "--steps",
            "32",
            "--trials",
            "14",
            "--quiet",
            "--from-diagnosis",
            str(deep_mlp_diagnosis),
        ],
        tmp_path,
    )
    assert (
        again.returncode == 0 and "baseline diagnosis" not in again.stderr
    )  # a resume enqueues none, says none
    study = optuna.load_study(study_name="deep-mlp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert [t.user_attrs.get("baseline") for t in study.trials].count("diagnosis") == 1


def test_a_default_outside_the_narrowed_space_is_trained_all_the_same(tmp_path, deep_mlp_diagnosis):
    """A moving window (growth_interval <= 4) excludes PyTorch's 2000: the default is trained there all the
    same (outside the narrowed range), so the answer is seen beside it; the other seeds are left out, said so.
    """
    data = {**json.loads(deep_mlp_diagnosis.read_text()), "growth_window": [1, 4]}
    (tmp_path / "d.json").write_text(json.dumps(data))
    proc = run_cli(
        [
            "--task", "deep-mlp", "--steps", "32", "--trials", "8", "--quiet", "--from-diagnosis", "d.json",
            "--best-out", "best.json",
        ],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "growth_interval over 1..4 (the diagnosis: <= 4)" in proc.stderr
    assert (
        "baseline seed-1 (PyTorch's default): growth_interval outside the search space, trained there all the"
        " same" in proc.stderr
    )
    assert "baseline seed-4 left out: growth_interval outside the search space" in proc.stderr
    assert "Fixed parameter" not in proc.stderr  # Optuna's out-of-range warning is expected, not shown
    study = optuna.load_study(study_name="deep-mlp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    defaults = [t for t in study.trials if t.user_attrs.get("baseline") == "seed-1"]
    assert len(defaults) == 1 and defaults[0].state.name == "COMPLETE"
    assert defaults[0].params["growth_interval"] == 2000 and defaults[0].params["init_scale"] == 2.0**16
    assert all(t.params["growth_interval"] <= 4 for t in study.trials if t.params and t not in defaults)
    # The summary, its JSON and the report show the default's numbers beside the answer's.
    assert re.search(r"^  seed-1 +0 +2\^16 +2 +0\.5 +2000 ", proc.stdout, re.M)
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["baselines"]["seed-1"]["growth_interval"] == 2000
    assert run_cli(["--out", "r.html"], tmp_path, module="search.report").returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert "Seed-2, seed-3, seed-4, seed-5 lie outside this study&#x27;s search space (not run)." in page
    assert "PyTorch&#x27;s default (seed-1) lies outside" not in page
    assert "no complete trial yet" not in page


def test_resuming_without_the_diagnosis_names_the_narrowed_range(tmp_path, deep_mlp_diagnosis):
    args = ["--task", "deep-mlp", "--steps", "32", "--trials", "6", "--quiet"]
    assert run_cli([*args, "--from-diagnosis", str(deep_mlp_diagnosis)], tmp_path).returncode == 0
    proc = run_cli(args, tmp_path)
    assert (
        proc.returncode == 2
        and "space.init_scale.high: study has 16777216.0, this run 4294967296.0" in proc.stderr
    )
    # The fix is the flag it began with, not another study nor --allow-changed-settings.
    assert proc.stderr.endswith(
        f"(its search started from a diagnosis: add --from-diagnosis {deep_mlp_diagnosis} as "
        "when it began; or use another --study-name)\n"
    ), proc.stderr
    assert run_cli([*args, "--from-diagnosis", str(deep_mlp_diagnosis)], tmp_path).returncode == 0


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {
                "verdict": "forward-overflow",
                "suggested_init_scale": None,
                "advice": "no loss scale helps: train in bf16",
            },
            (
                "the diagnosis found forward-overflow, which no starting scale fixes (no loss scale helps:"
                " train in bf16)"
            ),
        ),
        ({"task": "seed-mlp"}, "it diagnosed task seed-mlp, this run has task deep-mlp"),
        ({"seed": 7}, "it diagnosed seed 7, this run has seed 42"),
        ({"suggested_init_scale": None}, "it suggests no starting scale"),
        ({"runs": None, "settings": None, "verdict": None}, None),
    ],
)
def test_a_diagnosis_that_cannot_start_this_search_is_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys, deep_mlp_diagnosis, change, message
):
    data = {**json.loads(deep_mlp_diagnosis.read_text()), **change}
    data = {k: v for k, v in data.items() if not (v is None and k in ("runs", "settings", "verdict"))}
    (tmp_path / "d.json").write_text(json.dumps(data))
    before = sorted(tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)  # In this process: tests/cli/test_cli.py checks a process's bad-input exit.
    assert optimize_main(["--task", "deep-mlp", "--trials", "3", "--from-diagnosis", "d.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert (message or "not a diagnosis of a task") in err
    assert sorted(tmp_path.iterdir()) == before


def test_an_unreadable_file_is_one_line():
    with pytest.raises(ValueError, match="--from-diagnosis missing.json: No such file"):
        read_diagnosis("missing.json")


@pytest.mark.parametrize(
    "scaler, knob, diagnosed, suggested, low, high",
    [
        ("deepspeed", "initial_scale_power", 2.0**16, 2.0**20, 16, 24),  # whole powers of two
        ("deepspeed", "initial_scale_power", 2.0**16, 2.0**2, 0, 6),  # never below 2^0
        (
            "megatron",
            "initial_loss_scale",
            2.0**32,
            2.0**20,
            2.0**16,
            2.0**24,
        ),  # the default start left outside
        ("fairseq", "fp16_init_scale", 128.0, 0.3, 1, 5),  # whole scales of at least 1
    ],
)
def test_a_frameworks_starting_knob_is_narrowed_in_its_own_terms(
    scaler, knob, diagnosed, suggested, low, high
):
    start = DiagnosisStart("d.json", "underflow", suggested, diagnosed, "deep-mlp", 42, scaler)
    space = narrowed_space(DEFAULTS.space, start)
    narrowed = getattr(space, scaler)[knob]
    default = getattr(DEFAULTS.space, scaler)[knob]
    assert (narrowed.low, narrowed.high) == (low, high) and narrowed.fixed is None
    assert narrowed.log == default.log  # DeepSpeed's exponent stays linear: a log range cannot start at 0
    dist = distributions(space, scaler)[knob]  # what Optuna samples: it must accept the range
    assert (dist.low, dist.high, dist.log) == (low, high, default.log)
    assert space.init_scale == DEFAULTS.space.init_scale  # GradScaler's range is another rule's: untouched


@pytest.mark.parametrize(
    "scaler, knob, window, low, high, said",
    [
        ("torch", "growth_interval", (1, 4), 1, 4, "growth_interval over 1..4 (the diagnosis: <= 4)"),
        (
            "torch",
            "growth_interval",
            (64, None),
            64,
            2000,
            "growth_interval over 64..2000 (the diagnosis: >= 64)",
        ),
        (
            "torch",
            "growth_interval",
            (5000, None),
            2000,
            2000,  # a run longer than the space: its nearest end
            (
                "growth_interval at 2000..2000, the end of the config's range nearest the diagnosis's >="
                " 5000, which lies outside it"
            ),
        ),
        ("deepspeed", "loss_scale_window", (1, 4), 1, 4, "loss_scale_window over 1..4 (the diagnosis: <= 4)"),
        (
            "megatron",
            "loss_scale_window",
            (256, None),
            256,
            1000,
            "loss_scale_window over 256..1000 (the diagnosis: >= 256)",
        ),
        (
            "fairseq",
            "fp16_scale_window",
            (64, None),
            64,
            2**14,
            "fp16_scale_window over 64..16384 (the diagnosis: >= 64)",
        ),
    ],
)
def test_the_growth_window_narrows_each_rules_growth_knob(scaler, knob, window, low, high, said):
    start = DiagnosisStart("d.json", "underflow", 2.0**20, 2.0**16, "deep-mlp", 42, scaler, window)
    space = narrowed_space(DEFAULTS.space, start)
    narrowed = space.ranges(scaler)[knob]
    assert (narrowed.low, narrowed.high) == (low, high) and narrowed.fixed is None
    assert (distributions(space, scaler)[knob].low, distributions(space, scaler)[knob].high) == (low, high)
    assert (start.attrs(space)["growth_low"], start.attrs(space)["growth_high"]) == (low, high)
    assert said in start.note(space)


def test_a_growth_interval_the_config_fixes_stays_and_a_file_without_a_window_narrows_none():
    fixed = replace(DEFAULTS.space, growth_interval=ParamRange(1, 2000, True, fixed=100))
    start = DiagnosisStart("d.json", "underflow", 2.0**20, 2.0**16, "deep-mlp", 42, "torch", (1, 4))
    assert narrowed_space(fixed, start).growth_interval == fixed.growth_interval
    assert "growth_interval stays at the config's 100" in start.note(narrowed_space(fixed, start))
    older = replace(start, growth=None)  # a diagnosis written before growth windows
    assert narrowed_space(DEFAULTS.space, older).growth_interval == DEFAULTS.space.growth_interval
    assert "growth_interval not narrowed" in older.note(DEFAULTS.space)


@pytest.mark.parametrize(
    "space, suggested, message",
    [
        (
            replace(DEFAULTS.space, init_scale=ParamRange(1.0, 2.0**10, True)),
            2.0**20,
            "the config searches init_scale over 2^0..2^10, outside the 2^16..2^24 around the 2^20",
        ),
        # Powers of two only, and the suggestion (a user's own start, 1000) leaves none in 2^13.5..2^13.97.
        (
            replace(DEFAULTS.space, init_scale=ParamRange(2.0**13.5, 2.0**20, True, powers_of_two=True)),
            1000.0,
            "samples powers of two of init_scale, and none lies in 2^13.50..2^13.97 around the 2^9.97",
        ),
    ],
)
def test_a_config_range_the_narrowing_misses_is_refused(space, suggested, message):
    start = DiagnosisStart("d.json", "healthy", suggested, suggested, "deep-mlp", 42, "torch")
    with pytest.raises(DiagnosisFileError, match=message.replace("^", r"\^").replace(".", r"\.")):
        narrowed_space(space, start)


@pytest.mark.parametrize(
    "window",
    [[1, 4.0], [1, "4"], [5, 3], [48.0, None], "x", [True, None], [0, 4], [1]],
)
def test_a_malformed_growth_window_is_refused_in_one_line(tmp_path, deep_mlp_diagnosis, window):
    (tmp_path / "d.json").write_text(
        json.dumps({**json.loads(deep_mlp_diagnosis.read_text()), "growth_window": window})
    )
    with pytest.raises(
        DiagnosisFileError, match=r"growth_window .* is not \[low, high\] of whole numbers"
    ) as e:
        read_diagnosis(str(tmp_path / "d.json"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "setting",
    [
        {"init_scale": 1.0},
        [1, 2, 0.5, 4],
        {"init_scale": 2.0**20, "growth_factor": "2", "backoff_factor": 0.5, "growth_interval": 4},
    ],
)
def test_a_malformed_suggested_setting_is_refused_in_one_line(tmp_path, deep_mlp_diagnosis, setting):
    (tmp_path / "d.json").write_text(
        json.dumps({**json.loads(deep_mlp_diagnosis.read_text()), "suggested_setting": setting})
    )
    with pytest.raises(
        DiagnosisFileError, match=r"suggested_setting .* is not GradScaler's four settings"
    ) as e:
        read_diagnosis(str(tmp_path / "d.json"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "space, said",
    [
        (
            {"growth_factor": ParamRange(1.01, 8.0, True, fixed=1.5)},
            "baseline diagnosis left out: the config fixes growth_factor at 1.5, the diagnosis suggests 2",
        ),
        (
            {"init_scale": ParamRange(2.0**-20, 2.0**32, True, powers_of_two=True)},
            None,
        ),  # 2^20: a power of two
    ],
)
def test_the_suggestion_is_trained_only_as_it_is(space, said, deep_mlp_diagnosis):
    """A config that would train another setting (a fixed value, a start rounded to 2^k) leaves it out."""
    from search.core import diagnosis_trial

    setting = json.loads(deep_mlp_diagnosis.read_text())["suggested_setting"]
    kept, notes = diagnosis_trial(setting, replace(DEFAULTS.space, **space))
    assert (notes == [said] and not kept) if said else (notes == [] and len(kept) == 1)
    powers = replace(DEFAULTS.space, init_scale=ParamRange(2.0**-20, 2.0**32, True, powers_of_two=True))
    kept, notes = diagnosis_trial({**setting, "init_scale": 2.0**20.4}, powers)
    assert not kept and notes == [
        "baseline diagnosis left out: the config samples powers of two of init_scale, and "
        "the diagnosis suggests 2^20.40"
    ]


def test_a_suggestion_a_seed_baseline_already_measures_is_not_trained_twice(tmp_path, deep_mlp_diagnosis):
    """deep-mlp-sum's diagnosis suggests seed-2's setting; here PyTorch's default plays that part."""
    default = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    data = {**json.loads(deep_mlp_diagnosis.read_text()), "suggested_setting": default}
    (tmp_path / "d.json").write_text(json.dumps(data))
    proc = run_cli(
        ["--task", "deep-mlp", "--steps", "32", "--trials", "6", "--quiet", "--from-diagnosis", "d.json"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "note: baseline diagnosis not added: the setting the diagnosis suggests is baseline seed-1's,"
        " measured once as that"
        in proc.stderr
    )
    study = optuna.load_study(study_name="deep-mlp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    tags = [t.user_attrs.get("baseline") for t in study.trials]
    assert "diagnosis" not in tags and tags.count("seed-1") == 1
    (seed1,) = [t for t in study.trials if t.user_attrs.get("baseline") == "seed-1"]
    assert run_cli(["--out", "r.html"], tmp_path, module="search.report").returncode == 0
    assert (
        "the setting it suggested: init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval"
        f" 2000, trial #{seed1.number} (baseline seed-1), objective {seed1.value:.3g}."
        in (tmp_path / "r.html").read_text()
    )


def test_a_file_written_before_suggested_settings_starts_a_search_without_one(tmp_path, deep_mlp_diagnosis):
    data = {k: v for k, v in json.loads(deep_mlp_diagnosis.read_text()).items() if k != "suggested_setting"}
    (tmp_path / "d.json").write_text(json.dumps(data))
    assert read_diagnosis(str(tmp_path / "d.json")).setting is None
    proc = run_cli(
        ["--task", "deep-mlp", "--steps", "32", "--trials", "6", "--quiet", "--from-diagnosis", "d.json"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(study_name="deep-mlp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert "diagnosis" not in [t.user_attrs.get("baseline") for t in study.trials]


def test_a_search_of_other_steps_than_the_diagnosis_is_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys, deep_mlp_diagnosis
):
    monkeypatch.chdir(tmp_path)
    args = [
        "--task",
        "deep-mlp",
        "--steps",
        "64",
        "--trials",
        "3",
        "--from-diagnosis",
        str(deep_mlp_diagnosis),
    ]
    assert optimize_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it diagnosed 32 steps and this run trains 64 a trial" in err, err
    assert "diagnose with --steps 64, or search with --steps 32" in err
    assert list(tmp_path.iterdir()) == []

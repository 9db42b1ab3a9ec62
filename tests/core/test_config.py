import tomllib

import pytest

from search.core import DEFAULTS, ConfigError, load_settings, settings_from_dict

from conftest import ROOT


def test_default_toml_mirrors_the_built_in_defaults_exactly():
    with open(ROOT / "configs" / "default.toml", "rb") as f:
        assert tomllib.load(f) == DEFAULTS.to_dict()
    assert load_settings(str(ROOT / "configs" / "default.toml")) == DEFAULTS


def test_no_config_means_defaults():
    assert load_settings() == DEFAULTS
    assert DEFAULTS.study_name == "seed-mlp"


def test_file_then_flags(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\nepochs = 12\nseed = 7\n[space.growth_interval]\nfixed = 2000\n")
    s = load_settings(str(cfg), {"seed": 9, "trials": None})
    assert s.run.epochs == 12 and s.run.seed == 9 and s.run.trials == 100
    assert s.space.growth_interval.fixed == 2000


def test_round_trip_through_dict():
    assert settings_from_dict(DEFAULTS.to_dict()) == DEFAULTS


@pytest.mark.parametrize(
    "text, message",
    [
        ("[run\n", "malformed TOML"),
        ("[run]\nepochz = 3\n", "unknown config key [run.epochz]"),
        ("[space.momentum]\nlow = 1\n", "unknown config key [space.momentum]"),
        ("[run]\nepochs = 'ten'\n", "must be an integer"),
        ("[space.init_scale]\nlow = 10.0\nhigh = 1.0\n", "must not exceed high"),
        ("[space.backoff_factor]\nhigh = 1.0\n", "backoff_factor] high must be in (0, 1)"),
        ("[space.growth_factor]\nlow = 1.0\n", "growth_factor] low must be > 1"),
        ("[space.growth_factor]\nfixed = 0.5\n", "fixed must be > 1"),
        ("[space.growth_interval]\nlow = 0.5\n", "whole number"),
        ("[space.growth_factor]\npowers_of_two = true\n", "init_scale] only"),
        ("[run]\ntrials = -1\n", "trials must be >= 0"),
        ("[run]\nsampler = 'grid'\n", "unknown sampler"),
        ("[run]\ndevice = 'tpu'\n", "unknown device"),
        ("[penalty]\nlearn_threshold = 0\n", "learn_threshold must be in (0, 1]"),
        (
            "[space.deepspeed.hysteresis]\nlow = 0\n",
            "[space.deepspeed.hysteresis] low must be a whole number >= 1",
        ),
        (
            "[space.deepspeed.min_loss_scale]\nfixed = 0.5\n",
            "min_loss_scale] fixed must be a whole number >= 1",
        ),
        ("[space.fairseq.fp16_scale_tolerance]\nhigh = 1.5\n", "high must be in [0, 1]"),
        ("[space.megatron.growth_factor]\nlow = 2\n", "unknown config key [space.megatron.growth_factor]"),
        (
            "[space.megatron.hysteresis]\npowers_of_two = true\n",
            "powers_of_two applies to [space.init_scale] only",
        ),
        ("[space.fairseq.min_loss_scale]\nfixed = 1e-4\nlow = 1e-6\n", "sets fixed and low"),
        ("[run]\nscaler = 'apex'\n", "unknown scaler 'apex'"),
        (
            "[space.megatron.initial_loss_scale]\nfixed = 0.5\n",
            "requires min_loss_scale <= initial_loss_scale",
        ),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, text, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(str(cfg))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="cannot read config"):
        load_settings("/nonexistent/config.toml")


def test_a_study_name_the_storage_cannot_hold_is_bad_input(tmp_path):
    """Issue 14: a 600-character name on PostgreSQL failed at the first commit with Optuna's generic
    message (exit 1). It is bad input: one line, exit 2, nothing written, on every storage."""
    from search.core import MAX_STUDY_NAME
    from search.results import SUFFIX

    from conftest import run_cli

    assert MAX_STUDY_NAME + len(SUFFIX) == 512
    proc = run_cli(["--study-name", "x" * 600, "--trials", "1"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "study name is 600 characters; at most 504 fit" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    assert (
        run_cli(["--study-name", "x" * MAX_STUDY_NAME, "--trials", "1", "--quiet"], tmp_path).returncode == 0
    )


def test_default_study_names_are_readable():
    from search.core import default_study_name

    assert default_study_name("seed-mlp") == "seed-mlp"
    assert default_study_name("examples.noisy_regression:build") == "noisy_regression"
    assert default_study_name("tasks_for_tests:slow") == "tasks_for_tests-slow"
    assert (
        load_settings(overrides={"task": "examples.noisy_regression:build"}).study_name == "noisy_regression"
    )
    assert load_settings(overrides={"task": "a.b:build", "study_name": "mine"}).study_name == "mine"


def test_a_frameworks_knobs_are_searched_fixed_or_unfixed_from_the_file(tmp_path):
    """fairseq's threshold_loss_scale is fixed at 0 (none) by default: giving low/high searches it; fixing a
    DeepSpeed knob keeps its other knobs searched; the study's recorded form loads back the same."""
    cfg = tmp_path / "rules.toml"
    cfg.write_text(
        "[run]\nscaler = 'fairseq'\n[space.fairseq.threshold_loss_scale]\nlow = 0.001\nhigh = 0.5\nlog ="
        " true\n[space.deepspeed.hysteresis]\nfixed = 3\n"
    )
    settings = load_settings(str(cfg))
    threshold = settings.space.ranges("fairseq")["threshold_loss_scale"]
    assert (threshold.fixed, threshold.low, threshold.high, threshold.log) == (None, 0.001, 0.5, True)
    assert settings.space.ranges("deepspeed")["hysteresis"].fixed == 3
    assert settings.space.ranges("deepspeed")["loss_scale_window"].fixed is None
    assert DEFAULTS.space.ranges("fairseq")["threshold_loss_scale"].fixed == 0.0
    assert settings_from_dict(settings.to_dict()) == settings

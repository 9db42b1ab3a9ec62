import optuna
from optuna.distributions import FloatDistribution, IntDistribution

from search.config import DEFAULTS
from search.summary import format_summary, summarize

DISTS = {
    "init_scale": FloatDistribution(2.0**-20, 2.0**32, log=True),
    "growth_factor": FloatDistribution(1.01, 8.0, log=True),
    "backoff_factor": FloatDistribution(0.05, 0.95),
    "growth_interval": IntDistribution(1, 2000, log=True),
}


def _add(study, value, device, **attrs):
    params = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    base = {
        "device": device,
        "final_loss": value,
        "skipped_steps": 0,
        "learned": True,
        "failure": "none",
        "nonfinite": False,
        "train_seconds": 0.05,
    }
    base.update(attrs)
    study.add_trial(
        optuna.trial.create_trial(value=value, params=params, distributions=DISTS, user_attrs=base)
    )


def test_devices_are_kept_apart_and_failures_counted():
    study = optuna.create_study()
    _add(study, 0.42, "cpu", baseline="seed-1")
    _add(study, 0.40, "cpu")
    _add(study, 0.30, "cuda:0 (NVIDIA H100)")
    _add(study, 1.7, "cpu", failure="underflow", learned=False)
    _add(study, 19.0, "cpu", failure="nonfinite", nonfinite=True, final_loss=None)
    data = summarize(study, DEFAULTS.space)
    assert data["best"]["cpu"]["value"] == 0.40 and data["best"]["cuda"]["value"] == 0.30
    assert data["best"]["cuda"]["gradscaler"].startswith('torch.amp.GradScaler("cuda"')
    assert data["nonfinite_trials"] == 1 and data["silent_failures"]["underflow"] == 1
    assert list(data["baselines"]) == ["seed-1"]
    text = format_summary(data)
    assert "best/cpu" in text and "best/cuda" in text and "seed-1" in text
    assert "nonfinite trials: 1; silent failures: 1 underflow" in text


def test_empty_study():
    assert "no completed trial yet" in format_summary(summarize(optuna.create_study(), DEFAULTS.space))

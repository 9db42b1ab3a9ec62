"""The answer's line is a trial of the study: before a run stops it trains the line rounded (coarse to fine)
and answers with the coarsest rounding that measured the same; the line pasted and the number shown with it
are checked with the independent plain loop (tests/plain_loop.py)."""

from __future__ import annotations

import json
import math

import optuna
from optuna.trial import TrialState

from search.core import ROUNDING_OF
from search.tasks.seed_mlp import build

from conftest import run_cli
from plain_loop import plain_run

# init_scale 2^-6 .. 180, backoff_factor fixed at 0.4: no baseline can run (the default's 0.5 is fixed away),
# so the answer is a change, from a sampled trial with 16 digits.
NARROW = "[space.init_scale]\nlow = 0.015625\nhigh = 180.0\nlog = true\n[space.backoff_factor]\nfixed = 0.4\n"


def test_the_pasted_line_is_a_measured_rounding(tmp_path):
    (tmp_path / "narrow.toml").write_text(NARROW)
    args = [
        "--trials",
        "12",
        "--config",
        "narrow.toml",
        "--epochs",
        "30",
        "--quiet",
        "--best-out",
        "best.json",
    ]
    run = run_cli(args, tmp_path)
    assert run.returncode == 0, run.stderr
    trials = optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="seed-mlp").trials
    roundings = [t for t in trials if ROUNDING_OF in t.user_attrs]
    assert 1 <= len(roundings) <= 3 and all(t.state == TrialState.COMPLETE for t in roundings)
    assert (
        len(trials) == 12 + len(roundings)
        and f"{len(roundings)} more trained the answer's line rounded" in run.stdout
    )
    best = json.loads((tmp_path / "best.json").read_text())
    rec = best["recommended"]["cpu"]
    assert best["verdict"] == "change"
    line = (rec["init_scale"], rec["growth_factor"], rec["backoff_factor"], rec["growth_interval"])
    source = trials[rec["source_trial"]]
    if rec["rounded_from"] is not None and "did not measure the same" in rec["text"]:
        assert source.number == rec["rounded_from"]  # every rounding refused: the trial's own values
    else:  # the line is round: a power of two, or three significant digits at most
        assert math.log2(line[0]).is_integer() or float(f"{line[0]:.3g}") == line[0]
        assert ROUNDING_OF in source.user_attrs or rec["rounded_from"] is None
    # The number the answer shows is the line's own: the plain loop trains the pasted line to it.
    plain = plain_run(build(42), *line, 30)
    assert math.isclose(plain.objective, source.value, rel_tol=1e-5), (plain.objective, source.value)
    # A second run with the same N finds the study done: nothing more to round.
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(
        optuna.load_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="seed-mlp").trials
    ) == len(trials)

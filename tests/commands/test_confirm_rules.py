"""search.confirm on a framework study (``--scaler deepspeed``): the candidates, the framework's default and
the study's answer re-run on new seeds under DeepSpeed's rule, checked run by run against a plain AMP loop
moved by DeepSpeed 0.19.8's own DynamicLossScaler; the paired test against scipy; the answer weighed by the
runs."""

from __future__ import annotations

import html
import json
import math
import pathlib

import pytest
from optuna.trial import TrialState
from scipy import stats
from test_optimize_scalers import deepspeed_next

from search.core import LOSS_CURVE, NONFINITE, OVERFLOW_STEPS, SCALE_CURVE, SKIPPED_STEPS, setting_of
from search.results import answer_rule_study, default_label, summarize_confirmation
from search.scalers import RULES
from search.storage import settings_of
from search.tasks.sum_outliers import build
from search.training import run_steps

from conftest import built_once, load, run_cli
from plain_loop import LAST_RULE_MODEL, plain_evaluation, plain_rule_run

SEARCH = ["--task", "sum-outliers", "--scaler", "deepspeed", "--trials", "14", "--quiet"]
CONFIRM = ["--top", "2", "--seeds", "3", "--quiet"]
NAME = "sum-outliers"
RULE = RULES["deepspeed"]


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory) -> tuple[pathlib.Path, str, str]:
    """A 14-trial DeepSpeed study of sum-outliers (its default ends the run), confirmed on 3 new seeds:
    (its folder, what search.optimize printed, what search.confirm printed). Built once per session
    (conftest.built_once); a test that writes works on a copy."""

    def build(folder: pathlib.Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            # The sampler's seed takes the process's pid (two runs on one study sample apart): one fixed
            # study here, whichever test process builds it.
            patch.setattr("search.study._run_parts.process_token", lambda: "test-host:1")
            search = run_cli(SEARCH, folder)
        assert search.returncode == 0, search.stderr
        confirm = run_cli(CONFIRM, folder, module="search.confirm")
        assert confirm.returncode == 0, confirm.stderr
        (folder / "search.txt").write_text(search.stdout)
        (folder / "confirm.txt").write_text(confirm.stdout)

    folder = built_once(tmp_path_factory, "deepspeed-confirm", build)
    return folder, (folder / "search.txt").read_text(), (folder / "confirm.txt").read_text()


def _verdict_block(text: str) -> str:
    """From ``  verdict:`` to the end of its indented lines: the block it pastes, why, what new seeds said."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  verdict:"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[start:end])


def test_each_run_is_deepspeeds_rule_on_its_new_seed(confirmed):
    folder, _, printed = confirmed
    runs = [t for t in load(folder, f"{NAME}.confirm").trials if t.state == TrialState.COMPLETE]
    settings = settings_of(load(folder, NAME))
    space = settings.space
    labels = {t.user_attrs["config"] for t in runs}
    assert (
        default_label("deepspeed") in labels and len(labels) >= 3
    )  # best-1, best-2, the default (+ the answer)
    assert sorted(t.user_attrs["data_seed"] for t in runs) == sorted([43, 44, 45] * len(labels))
    assert "DeepSpeed's loss-scale rule" in printed and "initial_scale_power" in printed.splitlines()[4]
    # The default ends the run on every seed; the answer, another DeepSpeed setting, trains on them.
    default_runs = [t for t in runs if t.user_attrs["config"] == default_label("deepspeed")]
    assert all(t.user_attrs["failure"] == "ended_at_minimum" for t in default_runs)
    checked = [t for t in runs if t.user_attrs["data_seed"] == 44]
    for run in checked:  # Every configuration on one new seed, against DeepSpeed's own class.
        values = dict(setting_of(run.params, space, "deepspeed").values)
        problem = build(44)
        initial, next_scale = deepspeed_next(values)
        steps = run_steps(problem, settings.run.epochs, settings.run.steps)  # The search's own.
        scales, skipped, ended = plain_rule_run(problem, initial, next_scale, steps)
        assert run.user_attrs[SCALE_CURVE] == scales, (run.user_attrs["config"], values)
        assert run.user_attrs[OVERFLOW_STEPS] == [i for i, s in enumerate(skipped) if s]
        assert (run.user_attrs["failure"] == "ended_at_minimum") == ended
        if not ended:
            assert math.isclose(
                run.user_attrs["eval_loss"], plain_evaluation(problem, LAST_RULE_MODEL[0]), rel_tol=1e-6
            )


def test_the_paired_test_is_scipys_on_the_stored_runs(confirmed):
    folder, _, printed = confirmed
    runs = [t for t in load(folder, f"{NAME}.confirm").trials if t.state == TrialState.COMPLETE]
    skip = settings_of(load(folder, NAME)).penalty.skip

    def score(
        t,
    ) -> float:  # docs/objective.md: the objective less its skipped-step term (none when nonfinite).
        attrs = t.user_attrs
        return (
            t.value
            if attrs.get(NONFINITE)
            else t.value - skip * attrs[SKIPPED_STEPS] / len(attrs[LOSS_CURVE])
        )

    def by_seed(label: str) -> list[float]:
        return [
            score(t)
            for t in sorted(runs, key=lambda t: t.user_attrs["data_seed"])
            if t.user_attrs["config"] == label
        ]

    data = summarize_confirmation(f"sqlite:///{folder / 'study.db'}", NAME)
    assert data is not None
    for entry in data["comparisons"]:
        ours, default = by_seed(entry["label"]), by_seed(default_label("deepspeed"))
        assert len(ours) == len(default) == 3
        expected = stats.ttest_rel(ours, default)
        assert math.isclose(entry["p"], expected.pvalue, rel_tol=1e-9)
        assert math.isclose(entry["mean_diff"], sum(ours) / 3 - sum(default) / 3, rel_tol=1e-9)
    best = data["comparison"]
    assert (
        f"p={best['p']:.3g} < 0.05" in printed
    )  # Better beyond noise on new seeds: its default ends every run.


def test_both_commands_print_the_same_confirmed_verdict(confirmed, tmp_path):
    import shutil

    folder, searched, printed = confirmed
    shutil.copy(folder / "study.db", tmp_path / "study.db")  # it may write: a copy of the shared study
    again = run_cli(SEARCH, tmp_path)  # Nothing left to run: the summary alone, with the confirmation read.
    assert again.returncode == 0, again.stderr
    block = _verdict_block(printed)
    assert block == _verdict_block(again.stdout)
    assert block.startswith("  verdict: change ") and "Confirmed on new seeds" in block
    assert "Confirmed on new seeds" not in searched  # Before the runs, nothing was claimed of them.
    assert '"fp16": {' in block
    # Under the verdict, the answer's trial and the default's side by side, as the study stores them, and how
    # sure: not yet run on new seeds after the search, confirmed after search.confirm.
    trials = {t.number: t for t in load(folder, NAME).trials}
    default = next(t for t in trials.values() if t.user_attrs.get("baseline") == RULE.default_tag)
    why, pair = block.splitlines()[1:3]
    answer = trials[int(pair.split("the answer (#")[1].split(")")[0])]
    def measured(t) -> str:
        failure = "" if t.user_attrs["failure"] == "none" else f", {t.user_attrs['failure']}"
        steps = len(t.user_attrs[LOSS_CURVE])
        return f"objective {t.value:.4g}, {t.user_attrs[SKIPPED_STEPS]} of {steps} steps skipped{failure}"

    assert pair == (
        f"    the answer (#{answer.number}): {measured(answer)}; the default (#{default.number}):"
        f" {measured(default)}; confirmed on 3 new seeds"  # data seeds 43, 44, 45
    )
    assert _verdict_block(searched).splitlines()[2].endswith("; not yet run on new seeds (search.confirm)")
    # Why, in one sentence, from the two trials beside it: the default ends by the rule, the answer does not.
    assert default.user_attrs["failure"] != "none" and answer.user_attrs["failure"] == "none"
    ends = default.user_attrs["failure"]
    assert why == f"    why: the default ends in {ends} here and the answer trains without failure"


@pytest.mark.parametrize(
    "significant, diff, confirmed_as", [(False, -0.5, "not better"), (True, 2.0, "overturned")]
)
def test_runs_that_do_not_show_the_change_better_turn_the_answer_to_the_default(
    confirmed, significant, diff, confirmed_as
):
    folder, _, _ = confirmed
    study = load(folder, NAME)
    space = settings_of(study).space
    before = answer_rule_study(study.trials, space, "deepspeed")
    assert before is not None and before.verdict == "change"
    data = summarize_confirmation(f"sqlite:///{folder / 'study.db'}", NAME)
    assert data is not None
    # The answer's values were run under one label or another (best-k, or recommended when not among them).
    entry = next(
        c
        for c in data["comparisons"]
        if dict(setting_of(c["params"], space, "deepspeed").values) == before.values
    )
    entry.update(significant=significant, mean_diff=diff, p=0.01 if significant else 0.4)
    data["comparisons"] = [entry]
    after = answer_rule_study(study.trials, space, "deepspeed", confirmation=data)
    assert after is not None
    assert after.verdict == "keep-default" and after.values == dict(RULE.default) and after.changed == ()
    assert after.confirmed == confirmed_as
    assert ("Keep the default." in after.confirmation) == (confirmed_as == "not better")


def test_paste_is_refused_for_a_framework_study_and_nothing_is_written(confirmed, tmp_path):
    import shutil

    folder, _, _ = confirmed
    shutil.copy(folder / "study.db", tmp_path / "study.db")
    before = (tmp_path / "study.db").read_bytes()
    proc = run_cli([*CONFIRM, "--seeds", "4", "--paste", "accelerate"], tmp_path, module="search.confirm")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--paste accelerate" in proc.stderr and "DeepSpeed" in proc.stderr
    assert (tmp_path / "study.db").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "study.db"
    ]


def test_the_report_of_a_confirmed_framework_study_says_what_confirm_said(confirmed, tmp_path):
    """search.report draws a DeepSpeed study: its verdict lines are the ones search.confirm printed (the
    confirmation runs weigh the answer on both), its confirmation table lists the same configurations."""
    folder, _, printed = confirmed
    storage = f"sqlite:///{folder / 'study.db'}"
    for out in (["--out", str(tmp_path / "r.html")], ["--format", "json", "--out", str(tmp_path / "r.json")]):
        proc = run_cli(["--storage", storage, *out], tmp_path, module="search.report")
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    page = (tmp_path / "r.html").read_text()
    said = [line.strip() for line in _verdict_block(printed).splitlines()]
    block = said.index("for DeepSpeed:")
    words = [line for line in said[block + 1 :] if not line.startswith(("--fp16", '"', "{", "}", "note:"))]
    verdict = said[:block] + words
    # The verdict, the answer and the default side by side, why and what new seeds said, as confirm put them.
    assert all(f'<p class="text">{html.escape(line)}</p>' in page for line in verdict), verdict
    assert verdict[1].startswith("why: the default ends in ") and verdict[2].startswith("the answer (#")
    assert any(line.startswith("details: (") for line in verdict)
    data = json.loads((tmp_path / "r.json").read_text())
    labels = {c["label"] for c in data["confirmation"]["configs"]}
    assert default_label("deepspeed") in labels and all(html.escape(label) in page for label in labels)


def test_the_dashboard_shows_the_rules_study_as_the_commands_do(confirmed):
    """Read back with optuna-dashboard's own functions: the study note holds the summary search.confirm left
    (its confirmed verdict), each trial note the steps the rule skipped, hysteresis skips without a drop
    of the scale included; the curves figure names DeepSpeed's default."""
    import optuna
    from optuna_dashboard import get_note
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    folder, _, printed = confirmed
    study = load(folder, NAME)
    note = get_note(study)
    assert note.startswith("## DeepSpeed: the baselines vs the best") and _verdict_block(printed) in note
    silent = 0  # Skips the scale curve cannot show: an overflow that only spent the hysteresis.
    for trial in study.trials:
        overflows = trial.user_attrs[OVERFLOW_STEPS]
        text = get_note(optuna.Trial(study, trial._trial_id))
        if overflows:
            assert f"Skipped steps: **{len(overflows)} of {len(trial.user_attrs[SCALE_CURVE])}**" in text
            assert ", ".join(str(s + 1) for s in overflows[:12]) in text
        else:
            assert "Skipped steps: none" in text
        curve = trial.user_attrs[SCALE_CURVE]
        silent += sum(1 for s in overflows if s > 0 and curve[s] == curve[s - 1])
    assert silent  # Some overflow left the scale where it was, and is still counted as a skip.
    system = study._storage.get_study_system_attrs(study._study_id)
    assert "DeepSpeed's default" in get_plotly_graph_objects(system)["search-curves"]

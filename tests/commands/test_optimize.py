"""The command as a user runs it: real processes, real SQLite files."""

from __future__ import annotations

import json
import math
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from search.core import ROUNDING_OF
from search.optimize import main
from search.study import sampler_seed

from conftest import cli_env, load, read_only_media, run_cli, run_process, start_cli

REQUIRED_ATTRS = {
    "final_loss",
    "final_loss_fp32",
    "skipped_steps",
    "nonfinite",
    "failure",
    "final_scale",
    "loss_curve",
    "scale_curve",
    "learned",
    "device",
    "train_seconds",
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> pathlib.Path:
    """The real 12-trial study and its --best-out that test_confirm_runs.seed_mlp_study shares: read-only."""
    from test_confirm_runs import seed_mlp_study

    return seed_mlp_study(tmp_path_factory)


def test_run_creates_study_db_with_fair_trials(finished):
    study = load(finished)
    trials = study.get_trials()
    assert len(trials) == 12 and all(t.state == TrialState.COMPLETE for t in trials)
    first_losses = {t.user_attrs["loss_curve"][0] for t in trials}
    assert len(first_losses) == 1, "every trial must start from the same weights and data"
    for t in trials:
        assert REQUIRED_ATTRS <= set(t.user_attrs)
        assert len(t.user_attrs["loss_curve"]) == len(t.user_attrs["scale_curve"]) == 30
        assert t.user_attrs["device"] == "cpu" and math.isfinite(t.value)
        assert set(t.params) == {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}
    attrs = study.user_attrs
    assert attrs["task"] == "seed-mlp" and attrs["epochs"] == 30 and attrs["seed"] == 42
    assert attrs["amp_dtype"] == "float16" and "space" in attrs and "penalty" in attrs


def test_baselines_are_the_first_five_trials_once(finished):
    tags = [t.user_attrs.get("baseline") for t in load(finished).get_trials()]
    assert tags[:5] == ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]
    assert all(tag is None for tag in tags[5:])


def test_summary_and_best_json(finished):
    data = json.loads((finished / "best.json").read_text())
    assert data["states"]["COMPLETE"] == 12
    best = data["best"]["cpu"]
    assert best["value"] == min(t.value for t in load(finished).get_trials())
    assert best["gradscaler"].startswith('torch.amp.GradScaler("cpu", init_scale=')
    assert sorted(data["baselines"]) == ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]
    assert data["baselines"]["seed-3"]["skipped_steps"] > 0  # 2^24 overflows at first


def test_same_params_in_two_processes_give_identical_results(finished, tmp_path):
    proc = run_process(["--trials", "5", "--study-name", "again"], tmp_path, fresh=True)
    assert proc.returncode == 0, proc.stderr
    ours = {t.user_attrs["baseline"]: t for t in load(tmp_path, "again").get_trials()}
    theirs = {t.user_attrs["baseline"]: t for t in load(finished).get_trials()[:5]}
    for tag in theirs:
        assert ours[tag].user_attrs["loss_curve"] == theirs[tag].user_attrs["loss_curve"]
        assert ours[tag].user_attrs["final_loss"] == theirs[tag].user_attrs["final_loss"]
        assert ours[tag].value == theirs[tag].value


def test_resume_semantics_of_trials(tmp_path):
    short = ["--epochs", "3"]  # What a resume counts and samples, not what a trial learns.
    assert run_cli(["--trials", "7", *short, "--quiet"], tmp_path).returncode == 0
    assert len(load(tmp_path).get_trials()) == 7
    before = (tmp_path / "study.db").read_bytes()
    again = run_cli(["--trials", "7", *short], tmp_path)
    assert again.returncode == 0 and "already holds 7 finished trials" in again.stdout
    assert "seed-1" in again.stdout
    assert (tmp_path / "study.db").read_bytes() == before, "a finished study is not written to"
    more = run_cli(["--trials", "10", *short, "--quiet"], tmp_path)
    assert more.returncode == 0, more.stderr
    trials = load(tmp_path).get_trials()
    assert len(trials) == 10
    tags = [t.user_attrs.get("baseline") for t in trials if t.user_attrs.get("baseline")]
    assert sorted(tags) == ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(params)) == 10, "a resumed run must not repeat the first run's samples"


def test_sampler_seed_depends_on_trials_already_in_the_study():
    assert sampler_seed(42, 0) != sampler_seed(42, 7)
    assert sampler_seed(42, 7) == sampler_seed(42, 7) != sampler_seed(43, 7)


def test_real_divergence_is_stored_as_null_with_a_finite_penalty(tmp_path):
    proc = run_cli(["--trials", "6", "--task", "tasks_for_tests:exploding", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = load(tmp_path, "tasks_for_tests-exploding").get_trials()
    assert all(t.state == TrialState.COMPLETE for t in trials)
    nonfinite = [t for t in trials if t.user_attrs["nonfinite"]]
    assert nonfinite and all(t.user_attrs["failure"] == "nonfinite" for t in nonfinite)
    assert all(10.0 <= t.value <= 20.0 for t in nonfinite)
    assert any(v is None for t in nonfinite for v in t.user_attrs["loss_curve"])
    assert "nonfinite trials: " in proc.stdout and "nonfinite trials: 0" not in proc.stdout


def test_failing_trials_are_recorded_and_bounded(tmp_path):
    args = ["--trials", "20", "--task", "tasks_for_tests:broken_optimizer", "--max-failed-trials", "3"]
    proc = run_cli(args + ["--quiet"], tmp_path)
    assert proc.returncode == 1
    assert "3 trials failed in this run" in proc.stderr and "Traceback" not in proc.stderr
    trials = load(tmp_path, "tasks_for_tests-broken_optimizer").get_trials()
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 3 and not [t for t in trials if t.state == TrialState.RUNNING]
    assert all("optimizer factory is broken" in t.user_attrs["fail_reason"] for t in failed)
    # The failed baseline goes back to the queue: it is not lost, and not doubled.
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert [t.user_attrs["baseline"] for t in waiting].count("seed-1") == 1


def test_a_timeout_before_the_baselines_ran_says_they_are_queued(tmp_path):
    proc = run_cli(["--trials", "10", "--timeout", "0.01", "--quiet"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip()
    assert (
        line.count("\n") == 0
        and "seed-5 are queued and not run yet (this run stopped first: timeout (0.01 s))" in line
    )
    waiting = [t for t in load(tmp_path).trials if t.state == TrialState.WAITING]
    assert waiting and all(t.user_attrs.get("baseline") for t in waiting)


def test_trial_timeout_fails_the_trial_and_the_study_goes_on(tmp_path):
    args = [
        "--trials",
        "2",
        "--task",
        "tasks_for_tests:slow",
        "--trial-timeout",
        "0.3",
        "--max-failed-trials",
        "2",
        "--quiet",
    ]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 1
    failed = load(tmp_path, "tasks_for_tests-slow").get_trials(states=(TrialState.FAIL,))
    assert len(failed) == 2 and all("TrialTimeout" in t.user_attrs["fail_reason"] for t in failed)


def test_trial_timeout_leaves_out_the_first_trials_shared_references(tmp_path):
    """10 steps of ~50 ms: a trial trains ~0.5 s, under the 0.9 s limit, but the first trial also pays
    the fp32 reference run (another ~0.5 s) that every trial shares; that is not its own time."""
    args = [
        "--trials",
        "5",
        "--task",
        "tasks_for_tests:slow",
        "--epochs",
        "10",
        "--trial-timeout",
        "0.9",
        "--quiet",
    ]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = load(tmp_path, "tasks_for_tests-slow").get_trials()
    assert len(trials) == 5 and {t.state for t in trials} == {TrialState.COMPLETE}, [
        t.user_attrs for t in trials
    ]


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def existing(finished, tmp_path) -> pathlib.Path:
    shutil.copy(finished / "study.db", tmp_path / "study.db")
    return tmp_path


BAD_CONFIGS = {
    "malformed.toml": "[run\n",
    "unknown.toml": "[run]\ncolour = 'blue'\n",
    "range.toml": "[space.init_scale]\nlow = 1e6\nhigh = 1.0\n",
    "backoff.toml": "[space.backoff_factor]\nhigh = 1.5\n",
    "growth.toml": "[space.growth_factor]\nlow = 0.9\n",
    "fixed.toml": "[space.growth_interval]\nfixed = 2000\nlow = 10\n",
    "interval.toml": "[space.growth_interval]\nlow = 10\n",
    "latin1.toml": "[run]\n# caf\xe9\n",  # written as Latin-1 below: not UTF-8
    "evaluation.toml": "[penalty]\nevaluation = 'mode'\n",
}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "malformed.toml"], "malformed TOML"),
        (["--config", "unknown.toml"], "unknown config key [run.colour]"),
        (["--config", "range.toml"], "must not exceed high"),
        (["--config", "backoff.toml"], "must be in (0, 1)"),
        (["--config", "growth.toml"], "must be > 1"),
        (
            ["--config", "fixed.toml"],
            "[space.growth_interval] sets fixed and low: a fixed setting is not searched",
        ),
        (["--config", "latin1.toml"], "config latin1.toml is not UTF-8 text"),
        (["--steps", "10", "--epochs", "10"], "steps (10) and epochs (10) both set"),
        # The setting that differs, not two tables cut at the same place (a newcomer could not tell).
        (
            ["--config", "interval.toml"],
            "space.growth_interval.low: study has 1.0, this run 10.0 (use another",
        ),
        (["--config", "evaluation.toml"], "unknown [penalty] evaluation 'mode': use one of mean, median"),
        (["--config", "missing.toml"], "cannot read config"),
        (["--trials", "-3"], "trials must be >= 0"),
        (["--task", "no-such-task"], "unknown task 'no-such-task'"),
        (["--task", "tasks_for_tests.import_error:build"], "cannot import task module"),
        (["--task", "tasks_for_tests:wrong_type"], "returned dict, expected search.tasks.Problem"),
        (["--task", "tasks_for_tests:missing"], "has no callable 'missing'"),
        (["--device", "tpu"], "unknown device"),
        (["--device", "cuda"], "CUDA is not available"),
        (["--epochs", "40"], "cannot resume study 'seed-mlp': epochs: study has 30, this run 40"),
        # Issue 15: the seed itself differs, so say that (not "another torch build?").
        (["--seed", "1"], "cannot resume study 'seed-mlp': seed: study has 42, this run 1"),
        (["--storage", "sqlite:///not-a-db.txt"], "not-a-db.txt is not a SQLite database"),
        (["--storage", "sqlite:////no/such/dir/s.db"], "/no/such/dir does not exist"),
        (["--storage", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"], "cannot open storage"),
        # Found before any trial runs, not after all of them.
        (["--trials", "14", "--best-out", "."], "--best-out .: is a directory"),
        (
            ["--trials", "14", "--best-out", "/proc/best.json"],
            "--best-out /proc/best.json: cannot be created",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(existing, monkeypatch, capsys, args, message):
    monkeypatch.chdir(existing)
    for name, text in BAD_CONFIGS.items():
        (existing / name).write_text(text, encoding="latin-1" if name == "latin1.toml" else "utf-8")
    (existing / "not-a-db.txt").write_text("hello")
    before = _snapshot(existing)
    assert main(args + ["--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "hunter2" not in err
    assert _snapshot(existing) == before


def test_argparse_errors_exit_2_without_traceback(tmp_path):
    for args in (["--no-such-flag"], ["--trials", "many"], ["--sampler", "grid"]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_input_on_a_new_study_creates_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--task", "no-such-task"]) == 2
    assert main(["--device", "cuda:3"]) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "flag, value", [("--steps", "0"), ("--epochs", "0"), ("--steps", "-5"), ("--epochs", "-1")]
)
def test_a_run_length_below_one_is_refused_and_no_study_is_made(tmp_path, monkeypatch, capsys, flag, value):
    """0 in a config is the task's default length; typed as a flag it once ran a whole default study."""
    monkeypatch.chdir(tmp_path)
    assert main([flag, value, "--trials", "3", "--best-out", "best.json", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"search.optimize: error: {flag} must be >= 1, got {value}\n", err
    assert list(tmp_path.iterdir()) == []


def test_changed_settings_can_be_forced(existing, monkeypatch, capsys):
    monkeypatch.chdir(existing)
    assert main(["--trials", "13", "--epochs", "10", "--allow-changed-settings", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "resuming 'seed-mlp' with changed settings: epochs" in err
    trials = optuna.load_study(storage="sqlite:///study.db", study_name="seed-mlp").trials
    # Beyond the 13, a rounding of the answer's line where the sampled trials gave a change to round.
    assert len([t for t in trials if ROUNDING_OF not in t.user_attrs]) == 13


def test_help_documents_every_flag():
    proc = subprocess.run(
        [sys.executable, "-m", "search.optimize", "--help"], capture_output=True, text=True, env=cli_env()
    )
    for flag in (
        "--trials",
        "--config",
        "--storage",
        "--study-name",
        "--task",
        "--device",
        "--amp-dtype",
        "--epochs",
        "--seed",
        "--timeout",
        "--trial-timeout",
        "--sampler",
        "--max-failed-trials",
        "--best-out",
        "--quiet",
        "--pruner",
        "--population",
    ):
        assert flag in proc.stdout
    assert "[100]" in proc.stdout and "sqlite:///study.db" in proc.stdout


@pytest.mark.parametrize("old", [None, 1])
def test_a_study_measured_with_the_old_definitions_is_not_resumed(tmp_path, old):
    """Studies written before skips came from found_inf (and before the evaluation objective) hold
    other numbers: resuming one is refused, even with --allow-changed-settings."""
    import sqlalchemy

    short = ["--epochs", "3"]  # The refusal is checked, not the trials' numbers.
    assert run_cli(["--trials", "5", *short, "--quiet"], tmp_path).returncode == 0
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'study.db'}")
    with engine.begin() as c:  # What a study made by the previous version looks like.
        if old is None:
            c.exec_driver_sql("DELETE FROM study_user_attributes WHERE key = 'measurement'")
        else:
            c.exec_driver_sql("UPDATE study_user_attributes SET value_json = '1' WHERE key = 'measurement'")
    engine.dispose()
    before = (tmp_path / "study.db").read_bytes()
    for extra in ([], ["--allow-changed-settings"]):
        proc = run_cli(["--trials", "8", *short, "--quiet", *extra], tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert "measured with definition v1" in proc.stderr and "not comparable" in proc.stderr
    assert len([t for t in load(tmp_path).trials if t.state == TrialState.COMPLETE]) == 5
    assert (tmp_path / "study.db").read_bytes() == before


@pytest.mark.parametrize(
    "task, message, code",
    [
        ("tasks_for_tests:exits_at_build", "called sys.exit(0) while building", 2),
        ("tasks_for_tests:exits_in_loss", "its loss_fn called sys.exit(0) on the first batch", 2),
        (
            "tasks_for_tests:exits_in_training",
            "the task called sys.exit(0) during a trial (recorded as FAIL)",
            1,
        ),
        (
            "tasks_for_tests:vector_loss",
            "its loss_fn returned a tensor of shape (2048,); it must return one",
            2,
        ),
    ],
)
def test_a_task_that_exits_is_an_error_not_a_success(tmp_path, task, message, code):
    proc = run_cli(["--task", task, "--trials", "3", "--quiet"], tmp_path)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    if code == 2:
        assert list(tmp_path.iterdir()) == []  # bad input: nothing written
    else:  # the trial it cut short is recorded as FAIL, nothing is left RUNNING
        url = f"sqlite:///{tmp_path / 'study.db'}"
        (summary,) = optuna.get_all_study_summaries(url)
        trials = optuna.load_study(storage=url, study_name=summary.study_name).trials
        assert [t.state for t in trials if t.state != TrialState.WAITING] == [TrialState.FAIL]


def test_trials_zero_on_a_new_sqlite_file_writes_nothing(tmp_path):
    """Issue 15: --trials 0 in an empty directory left a 114 kB study.db with Optuna's tables."""
    proc = run_cli(["--trials", "0"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "study.db does not exist and --trials is 0: nothing to do" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_finished_study_on_read_only_media_prints_its_summary(finished, tmp_path, capsys):
    db = tmp_path / "study.db"
    shutil.copy(finished / "study.db", db)
    before = db.read_bytes()
    url = f"sqlite:///{db}"
    with read_only_media(db, tmp_path):
        assert not os.access(db, os.W_OK)  # Really read-only, root or not.
        capsys.readouterr()
        assert main(["--storage", url, "--trials", "12", "--quiet"]) == 0
        out, err = capsys.readouterr()
        # A study that needs more trials cannot run there: one line, exit 2.
        assert main(["--storage", url, "--trials", "13", "--quiet"]) == 2
        refused = capsys.readouterr().err
    assert "study already holds 12 finished trials" in out and "Study 'seed-mlp'" in out and err == ""
    assert refused.count("\n") == 1 and "is read-only" in refused and "12 of 13 trials finished" in refused
    assert sorted(os.listdir(tmp_path)) == ["study.db"] and db.read_bytes() == before


def test_a_reader_that_closes_stdout_early_is_not_a_storage_failure(tmp_path):
    """``search.optimize | true`` printed "storage sqlite:///study.db failed: [Errno 32] Broken pipe" and
    exited 1. The reader going away is no failure of the run: its trials are stored, --best-out is
    written, and the command ends quietly with 141 (128 + SIGPIPE), as a Unix tool does."""
    # 3 epochs a trial: what is checked is the pipe, not the training.
    args = ["--trials", "6", "--epochs", "3", "--quiet", "--best-out", "best.json"]
    proc = start_cli(args, tmp_path)
    proc.stdout.close()  # The reader is gone before the command writes a byte.
    err = proc.stderr.read()
    assert proc.wait(timeout=240) == 141, err
    assert err == ""
    assert len([t for t in load(tmp_path).get_trials() if t.state == TrialState.COMPLETE]) == 6
    assert json.loads((tmp_path / "best.json").read_text())["states"]["COMPLETE"] == 6
    # A reader that reads the first line and goes (head -1): whether our last write found it gone
    # or not, the run is a success or a quiet 141, never a storage failure.
    shell = subprocess.run(
        [
            "bash",
            "-c",
            (
                f"{shlex.quote(sys.executable)} -m search.optimize --trials 7 --epochs 3 --quiet | head -1; "
                "echo rc=${PIPESTATUS[0]} >&2"
            ),
        ],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert shell.stdout.startswith("this run: 1 complete") and shell.stdout.count("\n") == 1
    assert shell.stderr in ("rc=0\n", "rc=141\n"), shell.stderr
    assert len([t for t in load(tmp_path).get_trials() if t.state == TrialState.COMPLETE]) == 7


def test_a_study_recorded_before_the_evaluation_setting_resumes_and_another_evaluation_is_refused(
    existing, monkeypatch, capsys
):
    """A study recorded without [penalty] evaluation was judged on the mean: it resumes as it is; judging
    it on the median now would change its objective, so that is a changed setting like any other."""
    monkeypatch.chdir(existing)
    study = optuna.load_study(storage="sqlite:///study.db", study_name="seed-mlp")
    penalty = dict(study.user_attrs["penalty"])
    del penalty["evaluation"]
    study.set_user_attr("penalty", penalty)
    assert main(["--trials", "13", "--quiet"]) == 0
    assert "changed settings" not in capsys.readouterr().err
    (existing / "median.toml").write_text('[penalty]\nevaluation = "median"\n')
    assert main(["--trials", "14", "--config", "median.toml", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        'penalty.evaluation: study has "mean", this run "median"' in err and len(err.splitlines()) == 1
    ), err

"""A diagnosis kept in a study: ``search.diagnose --storage`` records it, ``search.optimize --from-diagnosis``
without a file starts from it, and a study never holds a diagnosis of another run than the one it searches."""

from __future__ import annotations

import datetime
import json
import shutil

import optuna
import pytest

from search.core import DEFAULTS
from search.diagnosis import HEALTHY_ADVICE, narrowed_space, read_diagnosis
from search.publishing.report._diagnoses import _diagnosis_section
from search.tasks import build_problem, resolve_task

from conftest import read_only_media, run_cli

DEEP = ["--task", "deep-mlp", "--steps", "32"]


def diagnose(args: list[str], cwd):  # noqa: ANN001, ANN201
    return run_cli(args, cwd, module="search.diagnose")


def test_the_record_is_the_json_less_its_runs_and_a_search_starts_from_it_as_from_the_file(
    tmp_path, postgres_url
):
    url = postgres_url.replace("postgres@", "postgres:hunter2@")  # trust auth: any password is accepted
    proc = diagnose([*DEEP, "--json", "d.json", "--storage", url], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr
    assert f"  recorded in study 'deep-mlp' of {url.replace('hunter2', '***')}\n" in proc.stdout
    assert (
        f"    to search from it: python -m search.optimize --storage '{url.replace('hunter2', '***')}' --task"
        " deep-mlp --steps 32 --from-diagnosis (with your password in place of ***)\n"
        in proc.stdout
    )
    written = json.loads((tmp_path / "d.json").read_text())
    record = optuna.load_study(study_name="deep-mlp", storage=url).user_attrs["recorded_diagnosis"]
    assert {k: v for k, v in record.items() if k not in ("fingerprint", "recorded_at")} == {
        k: v for k, v in written.items() if k not in ("runs", "skips")
    }
    assert record["fingerprint"] == build_problem(resolve_task("deep-mlp"), "deep-mlp", 42).fingerprint(32)
    age = datetime.datetime.now(datetime.timezone.utc) - datetime.datetime.fromisoformat(
        record["recorded_at"]
    )
    assert datetime.timedelta(0) <= age < datetime.timedelta(minutes=5)
    assert len(json.dumps(record)) < 4000  # far below MySQL's 64 kB TEXT, whatever the run's length

    proc = run_cli([*DEEP, "--storage", url, "--trials", "8", "--quiet", "--from-diagnosis"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr
    assert (
        f"note: from the diagnosis in study 'deep-mlp', recorded {record['recorded_at']} (underflow):"
        " init_scale searched over 2^16..2^24, around the 2^20 it suggests"
        in proc.stderr
    )
    study = optuna.load_study(study_name="deep-mlp", storage=url)
    from_file = narrowed_space(DEFAULTS.space, read_diagnosis(str(tmp_path / "d.json")))
    space = study.user_attrs["space"]
    assert (
        (space["init_scale"]["low"], space["init_scale"]["high"])
        == (from_file.init_scale.low, from_file.init_scale.high)
        == (2**16, 2**24)
    )
    assert (space["growth_interval"]["low"], space["growth_interval"]["high"]) == (32, 2000)
    started = study.user_attrs["diagnosis"]
    assert started["file"] is None and started["source"].startswith("study 'deep-mlp', recorded ")
    assert started["recorded_at"] == record["recorded_at"]  # how the report knows they are one diagnosis
    assert (
        started["verdict"] == "underflow"
        and started["suggested_init_scale"] == written["suggested_init_scale"]
    )
    assert study.user_attrs["recorded_diagnosis"] == record  # the search keeps it as it was
    sampled = [t.params for t in study.trials if "baseline" not in t.user_attrs and t.params]
    assert sampled and all(2**16 <= p["init_scale"] <= 2**24 and p["growth_interval"] >= 32 for p in sampled)
    resumed = run_cli([*DEEP, "--storage", url, "--trials", "9", "--quiet"], tmp_path)  # the flag left off
    assert resumed.returncode == 2 and resumed.stderr.endswith(
        "(its search started from a diagnosis: add --from-diagnosis as when it began; or use another"
        " --study-name)\n"
    )

    # The report says both, as the study holds them, and that they are one diagnosis.
    assert (
        run_cli(
            ["--storage", url, "--format", "json", "--out", "r.json"], tmp_path, module="search.report"
        ).returncode
        == 0
    )
    shown = json.loads((tmp_path / "r.json").read_text())["diagnosis"]
    assert shown == {"started_from": started, "recorded": record}
    assert run_cli(["--storage", url, "--out", "r.html"], tmp_path, module="search.report").returncode == 0
    page = (tmp_path / "r.html").read_text()
    (first,) = [
        t for t in study.trials if t.user_attrs.get("baseline") == "diagnosis"
    ]  # trained before sampling
    assert first.params == record["suggested_setting"]
    assert "task deep-mlp, 32 steps a trial, float16" in page  # not the task's default 8 epochs: --steps won
    assert (
        "The search started from the diagnosis in study &#x27;deep-mlp&#x27;, recorded"
        f" {record['recorded_at']}, which found underflow at init_scale 2^16: init_scale searched over"
        " 2^16..2^24, around the 2^20 it suggested; growth_interval over 32..2000; the setting it suggested:"
        f" init_scale 2^20, growth_factor 2, backoff_factor 0.5, growth_interval 2000, trial #{first.number}"
        f" (baseline diagnosis), objective {first.value:.3g}."
        in page
    )
    assert (
        f"That diagnosis ({record['recorded_at']}, search.diagnose on cpu, 32 steps): init_scale 2^16, "
        "growth_factor 2, backoff_factor 0.5, growth_interval 2000: underflow, because "
        in page
    )

    # A study searched before the attr held recorded_at: the time is read back from its source.
    legacy = {k: v for k, v in started.items() if k != "recorded_at"}
    assert _diagnosis_section("deep-mlp", legacy, record)[0].body.count("That diagnosis (") == 1
    # Another diagnosis recorded since: the report does not call it the one the search started from.
    later = {**record, "recorded_at": "2099-01-01T00:00:00+00:00"}
    for attr in (started, legacy):
        body = _diagnosis_section("deep-mlp", attr, later)[0].body
        assert "That diagnosis" not in body and "The diagnosis recorded in the study (2099-01-01" in body


@pytest.fixture(scope="module")
def seed_mlp_study(tmp_path_factory):
    """A seed-mlp study of search.optimize (30 steps a trial), no diagnosis in it."""
    folder = tmp_path_factory.mktemp("seed-mlp-study")
    assert run_cli(["--trials", "1", "--quiet"], folder).returncode == 0
    return folder / "study.db"


@pytest.mark.parametrize(
    "args, difference",
    [
        (
            ["--task", "deep-mlp", "--study-name", "seed-mlp"],
            "task: the diagnosis has deep-mlp, the study seed-mlp",
        ),
        (["--steps", "12"], "steps: the diagnosis has 12, the study 30"),
        (["--seed", "7"], "seed: the diagnosis has 7, the study 42"),
        (["--scaler", "fairseq"], "scaler: the diagnosis has fairseq, the study torch"),
    ],
)
def test_a_study_of_another_run_refuses_the_diagnosis_before_it_trains(
    tmp_path, seed_mlp_study, args, difference
):
    shutil.copy(seed_mlp_study, tmp_path / "study.db")
    before = (tmp_path / "study.db").read_bytes()
    proc = diagnose([*args, "--storage", "sqlite:///study.db", "--json", "d.json"], tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr
        == f"search.diagnose: error: study 'seed-mlp' searches another run ({difference}): diagnose "
        "it as it is searched, or record the diagnosis under another --study-name\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db"]
    assert (tmp_path / "study.db").read_bytes() == before


def test_a_second_diagnosis_replaces_the_first_and_a_search_of_another_run_is_refused(tmp_path):
    """The study holds one story: the last diagnosis, and only a search of the run it diagnosed."""
    first = diagnose(["--steps", "12", "--study-name", "s"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert (
        "  recorded in study 's' of sqlite:///study.db\n" in first.stdout
    )  # --study-name alone: the default storage
    # healthy: a search is optional
    assert f"    {HEALTHY_ADVICE}\n" in first.stdout and first.stdout.endswith(
        "    to search around it anyway: python -m search.optimize --study-name s --steps 12"
        " --from-diagnosis\n"
    )
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    recorded_at = optuna.load_study(study_name="s", storage=storage).user_attrs["recorded_diagnosis"][
        "recorded_at"
    ]
    second = diagnose(["--steps", "12", "--study-name", "s", "--growth-interval", "3"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert (
        "  recorded in study 's' of sqlite:///study.db, in place of the diagnosis recorded there at"
        f" {recorded_at} (task seed-mlp, seed 42: healthy)\n"
        in second.stdout
    )
    study = optuna.load_study(study_name="s", storage=storage)
    assert study.user_attrs["recorded_diagnosis"]["settings"]["growth_interval"] == 3
    assert study.trials == [] and "task" not in study.user_attrs  # nothing but the diagnosis yet
    for module in ("search.report", "search.confirm"):  # a diagnosis is not a search: said, not "not ours"
        proc = run_cli(["--study-name", "s"], tmp_path, module=module)
        assert (
            proc.returncode == 2
            and proc.stderr
            == f"{module}: error: study 's' holds a diagnosis (task seed-mlp: healthy) and no search yet:"
            " run "
            "search.optimize there (--from-diagnosis starts from it)\n"
        )

    before = (tmp_path / "study.db").read_bytes()
    refused = run_cli(["--study-name", "s", "--trials", "3"], tmp_path)  # seed-mlp's own 30 steps
    assert (
        refused.returncode == 2
        and refused.stderr
        == "search.optimize: error: study 's' holds a diagnosis of another run (steps: the diagnosis has 12,"
        " this run 30): search it as diagnosed, or use another --study-name\n"
    )
    assert (tmp_path / "study.db").read_bytes() == before
    searched = run_cli(["--study-name", "s", "--steps", "12", "--trials", "6", "--quiet"], tmp_path)
    assert searched.returncode == 0, searched.stderr
    study = optuna.load_study(study_name="s", storage=storage)
    assert study.user_attrs["task"] == "seed-mlp" and study.user_attrs["steps"] == 12
    assert "diagnosis" not in study.user_attrs  # searched without --from-diagnosis: the full space
    assert study.user_attrs["space"]["init_scale"]["high"] == DEFAULTS.space.init_scale.high


@pytest.mark.parametrize("make_db", [False, True])
def test_from_diagnosis_without_one_recorded_is_one_line_and_writes_nothing(tmp_path, make_db):
    if make_db:
        assert run_cli(["--trials", "1", "--quiet"], tmp_path).returncode == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    proc = run_cli(["--trials", "3", "--from-diagnosis"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    if make_db:
        assert (
            "error: --from-diagnosis: study 'seed-mlp' in sqlite:///study.db holds no diagnosis: record a"
            " diagnosis with search.diagnose --storage ... --study-name seed-mlp, or give its --json file"
            in proc.stderr
        )
    else:
        assert "error: --from-diagnosis: SQLite file study.db does not exist" in proc.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_study_that_holds_a_search_of_the_same_run_takes_the_diagnosis_but_suggests_no_search_from_it(
    tmp_path, seed_mlp_study
):
    """--from-diagnosis there would change the recorded space, so the command says so instead of a command
    that search.optimize refuses."""
    shutil.copy(seed_mlp_study, tmp_path / "study.db")
    proc = diagnose(["--storage", "sqlite:///study.db"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(
        "  recorded in study 'seed-mlp' of sqlite:///study.db\n    no search from it: the study already holds"
        " a search, whose space --from-diagnosis would change: to search from this diagnosis, record it under"
        " another --study-name\n"
    )
    refused = run_cli(["--trials", "3", "--from-diagnosis"], tmp_path)  # what that line spares the user
    assert refused.returncode == 2 and "cannot resume study 'seed-mlp': space." in refused.stderr
    assert run_cli(["--trials", "3", "--quiet"], tmp_path).returncode == 0  # the study's own search goes on


def test_a_diagnosis_whose_narrowing_the_space_refuses_suggests_no_search_and_the_report_says_why(tmp_path):
    """sum-outliers under DeepSpeed's rule, with a config that searches initial_scale_power from 21 only: the
    diagnosis centres a search on the 2^16 it diagnosed (its own proposal, 2^-15, trained worse and was
    withdrawn), which that space cannot reach. The diagnosis is recorded, and neither the command nor the
    search promises a search from it; the report, which reads the default space, says what that space does."""
    (tmp_path / "high.toml").write_text("[space.deepspeed.initial_scale_power]\nlow = 21\nhigh = 32\n")
    run = ["--task", "sum-outliers", "--scaler", "deepspeed", "--steps", "40", "--study-name", "so"]
    proc = diagnose([*run, "--config", "high.toml"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "the diagnosis's own proposal, initial_scale_power -15, a scale of 2^-15" in proc.stdout
    assert "trained here, it does worse" in proc.stdout
    why = (
        "the config searches initial_scale_power over 2^21..2^32, outside the 2^12..2^20 around the 2^16"
        " the diagnosis suggests"
    )
    assert proc.stdout.endswith(f"    no search from it: {why}\n"), proc.stdout
    refused = run_cli([*run, "--config", "high.toml", "--trials", "3", "--from-diagnosis"], tmp_path)
    assert refused.returncode == 2 and why in refused.stderr
    report = run_cli(["--study-name", "so"], tmp_path, module="search.report")
    assert report.returncode == 2 and report.stderr.endswith(
        "no search yet: run search.optimize there (--from-diagnosis starts from it)\n"
    )


def test_a_config_of_another_precision_or_read_only_storage_refuses_the_record_before_it_trains(
    tmp_path, seed_mlp_study
):
    (tmp_path / "bf16.toml").write_text('[run]\namp_dtype = "bfloat16"\n')
    proc = diagnose(["--config", "bf16.toml", "--study-name", "b"], tmp_path)
    assert (
        proc.returncode == 2
        and proc.stderr
        == "search.diagnose: error: a diagnosis trains fp16 and the config's amp_dtype is bfloat16: its study"
        " would search another run; record it with amp_dtype float16\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bf16.toml"]
    (tmp_path / "media").mkdir()
    shutil.copy(seed_mlp_study, tmp_path / "media" / "study.db")
    with read_only_media(tmp_path / "media"):  # the directory: SQLite could not write its journal
        proc = diagnose(["--storage", "sqlite:///media/study.db"], tmp_path)
    assert (
        proc.returncode == 2
        and proc.stderr
        == "search.diagnose: error: cannot record the diagnosis in media/study.db: it is read-only (or its"
        " directory is)\n"
    )


def test_from_diagnosis_reads_a_user_tasks_study_under_its_old_default_name(tmp_path):
    """search.optimize resumes a user task's study named after its import path; --from-diagnosis reads that
    one."""
    task = "tasks_for_tests:still"
    assert (
        run_cli(["--task", task, "--study-name", task, "--trials", "1", "--quiet"], tmp_path).returncode == 0
    )
    proc = run_cli(["--task", task, "--trials", "3", "--from-diagnosis"], tmp_path)
    assert proc.returncode == 2 and (
        f"--from-diagnosis: study '{task}' in sqlite:///study.db holds no diagnosis" in proc.stderr
    ), proc.stderr

"""python -m search.transfer: search.confirm's sibling study travels with its study (issue 15)."""

from __future__ import annotations

import hashlib
import pathlib
import shutil

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution

from search.storage import TrialWriter
from search.transfer import main

from conftest import run_cli


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A real 12-trial study and a real search.confirm of it (its sibling ``seed-mlp.confirm``), corners
    included: the one test_confirm_runs.seed_mlp_study shares (only read here; a test that writes copies it).
    """
    from test_confirm_runs import seed_mlp_study

    return seed_mlp_study(tmp_path_factory, confirmed=True) / "study.db"


def _study_names(url: str) -> list[str]:
    return sorted(s.study_name for s in optuna.get_all_study_summaries(url))


def test_the_confirmation_runs_are_copied_along_and_usable_there(confirmed, tmp_path, capsys):
    src, dest = _sqlite(confirmed), _sqlite(tmp_path / "copy.db")
    assert main(["--from", src, "--to", dest, "--to-study-name", "moved"]) == 0
    out = capsys.readouterr().out
    assert "copied study 'seed-mlp.confirm' as 'moved.confirm' (search.confirm's runs of 'seed-mlp')" in out
    assert "studies copied: 'seed-mlp' as 'moved', 'seed-mlp.confirm' as 'moved.confirm'" in out
    assert _study_names(dest) == ["moved", "moved.confirm"]
    runs = optuna.load_study(storage=src, study_name="seed-mlp.confirm").get_trials()
    copied = optuna.load_study(storage=dest, study_name="moved.confirm")
    assert [(t.number, t.state, t.value, t.params) for t in copied.trials] == [
        (t.number, t.state, t.value, t.params) for t in runs
    ]
    assert any(t.user_attrs.get("check") == "corner" for t in copied.trials)  # Corner runs travel too.
    assert [t.distributions for t in copied.trials] == [t.distributions for t in runs]
    assert "distributions:" not in out  # Nothing to align in runs written since 2026-12-04.
    # search.confirm finds its runs by their study's name: renamed along, so it has nothing to redo.
    assert copied.user_attrs["source_study"] == "moved"
    proc = run_cli(
        ["--storage", dest, "--study-name", "moved", "--top", "1", "--seeds", "2", "--no-corners", "--quiet"],
        tmp_path,
        module="search.confirm",
    )
    assert proc.returncode == 0 and "nothing to run" in proc.stdout, proc.stdout + proc.stderr


def test_no_confirm_copies_the_study_alone_and_says_so(confirmed, tmp_path, capsys):
    dest = _sqlite(tmp_path / "copy.db")
    assert main(["--from", _sqlite(confirmed), "--to", dest, "--no-confirm"]) == 0
    out = capsys.readouterr().out
    assert "studies copied: 'seed-mlp'\n" in out and "not copied: 'seed-mlp.confirm' (--no-confirm)" in out
    assert _study_names(dest) == ["seed-mlp"]


def test_an_existing_sibling_in_the_destination_is_bad_input(confirmed, tmp_path, capsys):
    dest = _sqlite(tmp_path / "copy.db")
    optuna.create_study(storage=dest, study_name="seed-mlp.confirm")
    before = _digest(tmp_path / "copy.db")
    assert main(["--from", _sqlite(confirmed), "--to", dest]) == 2
    assert "study 'seed-mlp.confirm' already exists" in capsys.readouterr().err
    assert _digest(tmp_path / "copy.db") == before
    assert main(["--from", _sqlite(confirmed), "--to", dest, "--overwrite"]) == 0
    assert _study_names(dest) == ["seed-mlp", "seed-mlp.confirm"]


def test_corner_runs_of_older_versions_are_copied_with_the_studys_log_flags(confirmed, tmp_path, capsys):
    """Before 2026-12-04 search.confirm wrote a corner run's one-value distributions with log=False, next to
    runs with the search's log=True: Optuna refused to copy such a study."""
    shutil.copy(confirmed, tmp_path / "old.db")
    src, dest = _sqlite(tmp_path / "old.db"), _sqlite(tmp_path / "copy.db")
    sibling = optuna.load_study(storage=src, study_name="seed-mlp.confirm")
    corner = next(t for t in sibling.trials if t.user_attrs.get("check") == "corner")
    old_style = {
        name: IntDistribution(int(v), int(v)) if name == "growth_interval" else FloatDistribution(v, v)
        for name, v in corner.params.items()
    }
    assert any(old_style[n].log != d.log for n, d in corner.distributions.items())
    TrialWriter(sibling).add(  # Written as search.confirm writes (Optuna's add_trial would refuse it).
        optuna.trial.create_trial(
            value=corner.value, params=corner.params, distributions=old_style, user_attrs=corner.user_attrs
        )
    )
    assert main(["--from", src, "--to", dest]) == 0
    out = capsys.readouterr().out
    assert "distributions: 1 trial(s) with one-value ranges written with the study's log flags" in out
    copied = optuna.load_study(storage=dest, study_name="seed-mlp.confirm").trials
    assert copied[-1].params == corner.params and copied[-1].value == corner.value
    assert copied[-1].distributions == corner.distributions

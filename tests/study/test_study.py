"""search.study._prepare: what a refused resume says."""

from __future__ import annotations

from search.study._prepare import _differences


def _attrs(**changes) -> dict:
    base = {"task": "seed-mlp", "epochs": 30, "steps": 0, "seed": 42, "amp_dtype": "float16", "space": {},
            "penalty": {}, "fingerprint": "abc", "measurement": 2}
    return {**base, **changes}


def test_another_torch_build_is_named_only_when_task_and_seed_match():
    assert _differences(_attrs(), _attrs(fingerprint="def")) == [
        "the task's data/initial weights differ (another torch build?)"
    ]
    # The seed explains the other data and weights (issue 15): say that, not "another torch build?".
    assert _differences(_attrs(), _attrs(seed=7, fingerprint="def")) == ["seed: study has 42, this run 7"]

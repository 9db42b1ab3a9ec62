"""configs/default.toml's [penalty] comments state what assess() does: each rule is checked by behaviour.

Each test first runs the rule against :func:`search.training.assess` (or the trainer), then checks that
the key's comment in the file states that rule, so a comment cannot drift from the code unnoticed.
"""

import pytest

from search.core import DEFAULTS, SILENT_FAILURES, load_settings
from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import LAST_STEP, TrainResult, assess, evaluation_of, train

from conftest import ROOT

PENALTY = DEFAULTS.penalty


def comment(section: str, key: str) -> str:
    """The comment after ``key = ...`` in ``[section]`` of configs/default.toml."""
    current = None
    for line in (ROOT / "configs" / "default.toml").read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line.split("=")[0].strip() == key:
            assert "#" in line, f"[{section}] {key} has no comment"
            return line.split("#", 1)[1]
    raise AssertionError(f"[{section}] {key} not in configs/default.toml")


def run(**kw) -> TrainResult:
    """A finite run of 10 steps that learned (median 1.0 -> 0.5), no skips, no zero gradients."""
    base = dict(
        loss_curve=[1.0] * 9 + [0.5],
        scale_curve=[1.0] * 10,
        skipped=[False] * 10,
        final_loss=0.5,
        final_loss_fp32=0.5,
        eval_loss=0.5,
        initial_eval_loss=1.0,
        eval_median=0.5,
        initial_eval_median=1.0,
        evaluation="final_weights",
        skipped_steps=0,
        zero_grad_fraction=0.0,
        fp32_zero_fraction=0.0,
        weights_finite=True,
        steps=10,
        train_seconds=0.1,
    )
    return TrainResult(**{**base, **kw})


def test_underflow_is_zero_share_50_points_above_fp32_whether_or_not_the_run_learned():
    above_50 = assess(run(zero_grad_fraction=0.75, fp32_zero_fraction=0.25), PENALTY)
    assert above_50.learned and above_50.failure == "underflow"
    assert assess(run(zero_grad_fraction=0.74, fp32_zero_fraction=0.25), PENALTY).failure == "none"
    # All gradients 0 is no underflow when the fp32 run has them too (a model's own zeros).
    assert assess(run(zero_grad_fraction=0.9, fp32_zero_fraction=0.9), PENALTY).failure == "none"
    text = comment("penalty", "underflow_threshold")
    assert PENALTY.underflow_threshold == 0.5
    assert all(words in text for words in ("50 points", "fp32", "learned or not"))


def test_learned_compares_median_chunk_losses_not_means_and_a_finite_rise_is_frozen():
    initial = evaluation_of([20.8, 1.0, 1.0, 1.0, 1.0, 100.0])  # whole-set loss, then chunk losses
    typical_fell = evaluation_of([20.4, 0.5, 0.5, 0.5, 0.5, 100.0])  # mean -2%, median -50%
    outlier_fell = evaluation_of([0.8, 1.0, 1.0, 1.0, 1.0, 0.0])  # mean -96%, median 0%

    def judged(final, initial=initial):
        return assess(
            run(
                eval_loss=final.loss,
                eval_median=final.median_chunk_loss,
                initial_eval_loss=initial.loss,
                initial_eval_median=initial.median_chunk_loss,
            ),
            PENALTY,
        )

    assert judged(typical_fell).learned and judged(typical_fell).failure == "none"
    assert not judged(outlier_fell).learned and judged(outlier_fell).failure == "frozen"
    at_90 = evaluation_of([1.0, 0.9])  # exactly (1 - learn_threshold) x the initial median: learned
    assert judged(at_90, evaluation_of([1.0, 1.0])).learned
    rose = assess(run(eval_loss=3.0, eval_median=3.0), PENALTY)  # finite loss that went up
    assert rose.failure == "frozen" and rose.value == pytest.approx(3.0 + PENALTY.silent)
    text = comment("penalty", "learn_threshold")
    assert PENALTY.learn_threshold == 0.1
    assert all(words in text for words in ("median chunk", "90%", "initial", "last step", "first"))
    assert "frozen (did not learn)" in comment("penalty", "silent")


def test_full_batch_without_eval_data_compares_the_last_step_loss_with_the_first():
    r = train(build(42), ScalerConfig(2.0**16, 2.0, 0.5, 2000), epochs=5)  # seed-mlp: full batch, no eval set
    assert r.evaluation == LAST_STEP
    assert (r.initial_eval_median, r.eval_median) == (r.loss_curve[0], r.loss_curve[-1])


def test_nonfinite_value_counts_optimizer_steps():
    nan = float("nan")
    # 4 epochs of 5 steps each: the first NaN at step 6 (epoch 1) of 20.
    a = assess(run(loss_curve=[1.0] * 6 + [nan] * 14, steps=20, final_loss=nan), PENALTY)
    assert a.failure == "nonfinite" and a.value == pytest.approx(PENALTY.nonfinite * (2 - 6 / 20))
    text = comment("penalty", "nonfinite")
    assert "nonfinite * (2 - first_bad_step / steps)" in text and "epoch" not in text


def test_churn_skip_and_silent_comments_match_assess():
    churn = assess(run(skipped_steps=5), PENALTY)
    assert churn.failure == "overflow_churn"
    assert churn.value == pytest.approx(0.5 + PENALTY.skip * 0.5 + PENALTY.silent)
    kept = assess(run(skipped_steps=4), PENALTY)
    assert kept.failure == "none" and kept.value == pytest.approx(0.5 + PENALTY.skip * 0.4)
    assert PENALTY.churn_threshold == 0.5 and ">= 50% of the steps" in comment("penalty", "churn_threshold")
    assert "skipped" in comment("penalty", "skip")
    assert all(code in comment("penalty", "silent") for code in SILENT_FAILURES)


def test_fixing_a_parameter_as_the_header_says_loads(tmp_path):
    text = (ROOT / "configs" / "default.toml").read_text()
    assert "replace its low/high/log with  fixed = 2000" in text
    section = "[space.growth_interval]\nlow = 1.0"
    start = text.index(section)
    end = text.index("[penalty]")
    path = tmp_path / "fixed.toml"
    path.write_text(text[:start] + "[space.growth_interval]\nfixed = 2000\n\n" + text[end:])
    assert load_settings(str(path)).space.growth_interval.fixed == 2000

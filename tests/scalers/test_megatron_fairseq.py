"""MegatronScale and FairseqScale against transcriptions written here from the frameworks' sources (neither
framework installs on this CPU machine): Megatron-LM megatron/core/optimizer/grad_scaler.py,
DynamicGradScaler.update, commit eedfe533a44ee918b1ad422269063af5155e1eaa (a float32 torch scale, as there);
fairseq fairseq/optim/dynamic_loss_scaler.py, DynamicLossScaler.update/check_overflow, commit
f591cc94caa85098ccf125a4782f91125b6a086d. Random overflow sequences on settings that are not the defaults (nor
powers of two), and hand-worked sequences that show each rule's turns."""

from __future__ import annotations

import random

import pytest
import torch

from search.scalers import FairseqScale, MegatronScale, ScaleAtMinimum, ScalerConfig
from search.tasks.seed_mlp import build
from search.training import train

from plain_loop import plain_rule_run


def megatron_scales(overflows, initial, minimum, window, hysteresis, growth, backoff):
    """The scale after each step, as DynamicGradScaler computes it: float32 tensors, trackers as there."""
    scale = torch.tensor([initial], dtype=torch.float)
    low, up, down = (torch.tensor([v], dtype=torch.float) for v in (minimum, growth, backoff))
    tracker, left, out = 0, hysteresis, []
    for overflow in overflows:
        if overflow:
            tracker, left = 0, left - 1
            if left <= 0:
                scale = torch.max(scale * down, low)
        else:
            tracker += 1
            if tracker == window:
                tracker, left, scale = 0, hysteresis, scale * up
        out.append(float(scale))
    return out


def fairseq_scales(overflows, init, window, tolerance, minimum, threshold):
    """The scale after each step as fairseq's scaler leaves it, and the step that ends the run (or None)."""
    scale, it, last_overflow, last_rescale, since = init, 0, -1, -1, 0
    out = []
    for step, overflow in enumerate(overflows):
        if not overflow:
            if (it - last_overflow) % window == 0:
                scale, last_rescale = scale * 2.0, it
            it += 1
        else:
            previous, span = scale, it - last_rescale
            last_overflow, since = it, since + 1
            if since / float(span) >= tolerance:
                scale = scale / 2.0 if threshold is None else max(scale / 2.0, threshold)
                last_rescale, since = it, 0
            if scale <= minimum:
                return out, step + 1, previous
            it += 1
        out.append(scale)
    return out, None, scale


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.8])
@pytest.mark.parametrize(
    "initial, minimum, window, hysteresis, growth, backoff",
    [(2.0**32, 1.0, 1000, 2, 2.0, 0.5), (1234.5, 3.7, 7, 3, 1.7, 0.37), (77.7, 0.3, 3, 1, 2.0, 0.5)],
)
def test_megatron_scale_matches_the_transcription(
    rate, initial, minimum, window, hysteresis, growth, backoff
):
    rng = random.Random(f"{rate}{initial}")
    overflows = [rng.random() < rate for _ in range(300)]
    ours = MegatronScale(initial, minimum, window, hysteresis, growth, backoff)
    assert [(ours.update(o), ours.scale)[1] for o in overflows] == megatron_scales(
        overflows, initial, minimum, window, hysteresis, growth, backoff
    )


def test_megatron_turns_by_hand():
    """Hysteresis 2, window 3, 2^5: the first overflow only spends hysteresis, the second backs off, and so
    does every later one until a growth refills it; at the minimum the scale is clamped and the run goes on.
    """
    scale = MegatronScale(32.0, 4.0, 3, 2)
    events = [scale.update(o) for o in (True, True, True, False, False, False, True, True, True, True)]
    # 32: spent, 16, 8; clean x3: 16; spent, 8, 4 (the minimum), clamped there.
    assert events == [
        "hysteresis",
        "backed off",
        "backed off",
        "kept",
        "kept",
        "grew",
        "hysteresis",
        "backed off",
        "backed off",
        "at minimum",
    ]
    assert scale.scale == 4.0


@pytest.mark.parametrize("rate", [0.02, 0.2, 0.6])
@pytest.mark.parametrize(
    "init, window, tolerance, minimum, threshold",
    [
        (128.0, 2**14, 0.0, 1e-4, None),
        (1000.0, 5, 0.25, 0.37, None),
        (300.0, 3, 0.0, 1e-4, 9.5),
        (6.0, 4, 0.0, 1.3, None),
    ],
)
def test_fairseq_scale_matches_the_transcription(rate, init, window, tolerance, minimum, threshold):
    rng = random.Random(f"{rate}{init}{window}")
    overflows = [rng.random() < rate for _ in range(300)]
    expected, ended_at, last = fairseq_scales(overflows, init, window, tolerance, minimum, threshold)
    ours = FairseqScale(init, window, tolerance, minimum, threshold)
    seen = []
    for overflow in overflows:
        try:
            ours.update(overflow)
        except ScaleAtMinimum as stop:
            assert ended_at is not None and f"at step {ended_at}" in str(stop) and ours.scale == last
            break
        seen.append(ours.scale)
    else:
        assert ended_at is None
    assert seen == expected


def test_fairseq_turns_by_hand():
    """Window 3 from 10: growth on the 3rd clean step; with tolerance 0.5 an overflow halves only when
    overflows make up half the steps since the last rescale; halving to the minimum ends the run with the
    scale put back.
    """
    scale = FairseqScale(10.0, 3, 0.5, 1.5)
    assert [scale.update(False) for _ in range(3)] == ["kept", "kept", "grew"]
    assert scale.scale == 20.0
    assert [scale.update(o) for o in (False, False, True, True)] == [
        "kept",
        "kept",
        "tolerated",
        "backed off",
    ]
    assert scale.scale == 10.0
    with pytest.raises(ScaleAtMinimum):
        for _ in range(10):
            scale.update(True)
    assert scale.scale == 2.5  # 10 -> 5 -> 2.5; the next halving (1.25 <= 1.5) is put back and ends the run


def test_the_trainer_moves_the_scale_by_megatrons_and_fairseqs_rules():
    """Seed-mlp (it overflows above about 2^19.4) for 30 steps: the trainer under MegatronScale and
    FairseqScale skips the same steps with the same scales as a plain loop driven by the transcriptions, and
    fairseq's minimum ends both runs at the same step."""
    problem = build(42)
    history: list[bool] = []

    def megatron_next(overflow):
        history.append(overflow)
        return megatron_scales(history, 1.37 * 2**27, 3.7, 4, 2, 2.0, 0.5)[-1]

    scales, skipped, _ = plain_rule_run(problem, float(torch.tensor(1.37 * 2**27)), megatron_next, 30)
    ours = train(
        problem, ScalerConfig(1.0, 2.0, 0.5, 1), steps=30, scale_rule=MegatronScale(1.37 * 2**27, 3.7, 4, 2)
    )
    assert ours.scale_curve == scales and ours.skipped == skipped and sum(skipped) > 0

    for minimum, ends in (
        (1e-4, False),
        (600_000.0, True),
    ):  # 1,024,000 overflows; halved it is under 600,000
        seen: list[bool] = []

        def fairseq_next(overflow, minimum=minimum):
            seen.append(overflow)
            out, ended_at, _last = fairseq_scales(seen, 1000.0 * 2**14, 6, 0.0, minimum, None)
            return None if ended_at is not None else out[-1]

        scales, skipped, ended = plain_rule_run(problem, 1000.0 * 2**14, fairseq_next, 30)
        ours = train(
            problem,
            ScalerConfig(1.0, 2.0, 0.5, 1),
            steps=30,
            scale_rule=FairseqScale(1000.0 * 2**14, 6, 0.0, minimum),
        )
        assert (
            ours.scale_curve == scales
            and ours.skipped == skipped
            and ended == ends == bool(ours.ended_by_rule)
        )

"""A framework's scaler as a checkpoint saves it, continued: against the framework's own class (DeepSpeed's
``DynamicLossScaler``, pickled whole as ZeRO saves it) or a transcription with its own ``state_dict`` and
``load_state_dict`` (Megatron-LM's ``DynamicGradScaler``, fairseq's fp16 optimizer), on settings that are not
the defaults: the same scale after every step from the checkpoint on, and the run ended at the same step."""

from __future__ import annotations

import pickle
import random

import pytest
import torch

from search.scalers import DEEPSPEED, FAIRSEQ, GRADSCALER, MEGATRON, ScaleAtMinimum, saved_rule
from search.tasks import CheckpointError, read_checkpoint

from frameworks import PlainDynamicGradScaler, deepspeed_scaler
from test_megatron_fairseq import fairseq_scales


def overflows(seed: int, count: int, rate: float) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < rate for _ in range(count)]


def save_and_read(tmp_path, scaler_entry) -> tuple:  # noqa: ANN001
    """A torch.save checkpoint holding ``scaler_entry`` as its scaler, read back: (StartState, rule)."""
    path = tmp_path / "run.pt"
    torch.save({"model": {}, "step": 40, "scaler": scaler_entry}, path)
    start = read_checkpoint(path)
    return start, start.scaler_rule


def go_on(machine, seen: list[bool]) -> tuple[list[float], int | None]:  # noqa: ANN001
    """The scale after each step of ``seen``, and the step (counted from 1) at which the rule ended the
    run, or None."""
    scales = []
    for step, overflow in enumerate(seen, start=1):
        try:
            machine.update(overflow)
        except ScaleAtMinimum:
            return scales, step
        scales.append(machine.scale)
    return scales, None


@pytest.mark.parametrize(
    "power, window, hysteresis, consecutive, minimum, rate",
    [(11, 7, 3, False, 2, 0.3), (9, 5, 4, True, 1, 0.25), (20, 3, 1, False, 64, 0.35)],
)
def test_deepspeeds_pickled_loss_scaler_goes_on_as_its_own_class(
    tmp_path, power, window, hysteresis, consecutive, minimum, rate
):
    """40 steps of DeepSpeed's class, pickled whole into the checkpoint (ZeRO's ``state_dict`` holds the
    object); then 300 more steps of the loaded object beside the rule resumed from the checkpoint: every scale
    the same, and the run ended at the same step where the scale reaches its minimum. Its settings come from
    the object, none assumed."""
    theirs = deepspeed_scaler(power, window, hysteresis, consecutive, minimum)
    for overflow in overflows(power, 40, rate / 2):
        theirs.update_scale(overflow)
    start, rule = save_and_read(tmp_path, theirs)
    assert rule is DEEPSPEED and start.scaler_assumed() == ""
    values = start.scaler_setting().values
    assert values == {
        "initial_scale_power": int(torch.tensor(theirs.cur_scale).log2().item()),
        "loss_scale_window": window,
        "hysteresis": hysteresis,
        "consecutive_hysteresis": int(consecutive),
        "min_loss_scale": minimum,
    }
    ours = rule.resumed(values, start.scaler_state)
    loaded = pickle.loads(pickle.dumps(theirs))  # As DeepSpeed's load_state_dict puts the object back.
    seen = overflows(power + 1, 300, rate)
    expected, ended = [], None
    for step, overflow in enumerate(seen, start=1):
        try:
            loaded.update_scale(overflow)
        except Exception as e:  # DeepSpeed raises a bare Exception at its minimum.
            assert "already at minimum" in str(e)
            ended = step
            break
        expected.append(loaded.cur_scale)
    assert go_on(ours, seen) == (expected, ended)
    moves = list(zip(expected, expected[1:]))
    assert any(b < a for a, b in moves) and any(b > a for a, b in moves)  # it backed off and grew on the way


@pytest.mark.parametrize("flags_saved", [True, False])
def test_megatrons_state_dict_goes_on_as_its_own_load_state_dict(tmp_path, flags_saved):
    """Megatron's state_dict holds the scale and both trackers, not the run's flags: the checkpoint may add
    them under the rule's names; else they are taken at Megatron's defaults, and said so."""
    flags = dict(min_scale=3.7, growth_factor=2.0, backoff_factor=0.5, growth_interval=6, hysteresis=3)
    theirs = PlainDynamicGradScaler(1.37 * 2**27, **flags)
    for overflow in overflows(3, 40, 0.3):
        theirs.update(overflow)
    entry = theirs.state_dict()
    if flags_saved:
        entry |= {"min_loss_scale": 3.7, "loss_scale_window": 6, "hysteresis": 3}
    start, rule = save_and_read(tmp_path, entry)
    assert rule is MEGATRON
    values = start.scaler_setting().values
    assert values["initial_loss_scale"] == theirs._scale.item() != 1.37 * 2**27
    if not flags_saved:
        assert values | {"initial_loss_scale": 0} == MEGATRON.default | {"initial_loss_scale": 0}
        assert start.scaler_assumed() == (
            "the checkpoint's Megatron-LM scaler holds no min_loss_scale, loss_scale_window, hysteresis:"
            " taken at Megatron-LM's defaults (add them to its scaler entry under these names where the run"
            " set them)"
        )
        return
    assert start.scaler_assumed() == ""
    assert (values["min_loss_scale"], values["loss_scale_window"], values["hysteresis"]) == (3.7, 6, 3)
    ours = rule.resumed(values, start.scaler_state)
    loaded = PlainDynamicGradScaler(1.37 * 2**27, **flags)
    loaded.load_state_dict(theirs.state_dict())
    seen = overflows(4, 300, 0.4)
    expected = []
    for overflow in seen:
        loaded.update(overflow)
        expected.append(loaded._scale.item())
    assert go_on(ours, seen) == (expected, None)
    assert expected[0] != 1.37 * 2**27 and min(expected) == pytest.approx(3.7)  # it reached its floor


def test_fairseqs_saved_loss_scale_starts_its_counters_afresh(tmp_path):
    """fairseq's fp16 optimizers save ``loss_scale`` alone and load it into a scaler whose counters start at
    zero: the run goes on as fairseq's rule from that scale (the transcription of its scaler)."""
    start, rule = save_and_read(tmp_path, {"loss_scale": 1000.0 * 2**-3})
    assert rule is FAIRSEQ and "fp16_scale_window" in start.scaler_assumed()
    values = start.scaler_setting().values
    assert values["fp16_init_scale"] == 125 and values["fp16_scale_window"] == 2**14
    values |= {"fp16_scale_window": 6}  # The window a run of this length sees grow.
    seen = overflows(5, 200, 0.2)
    expected, ended, _ = fairseq_scales(seen, 125.0, 6, 0.0, 1e-4, None)
    assert go_on(rule.resumed(values, start.scaler_state), seen) == (expected, ended)


def test_which_rule_a_saved_scaler_is_of_is_told_by_its_keys():
    gradscaler = torch.amp.GradScaler("cpu", init_scale=3.3e6).state_dict()
    assert saved_rule(gradscaler) is GRADSCALER
    megatron = {"scale": torch.tensor([8.0]), "growth_tracker": 0, "hysteresis_tracker": 2}
    assert saved_rule(megatron) is MEGATRON
    assert saved_rule({"loss_scale": 8.0}) is FAIRSEQ
    assert saved_rule({"scale": 8.0}) is None


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"scale": 8.0, "growth_tracker": 1}, "it lacks hysteresis_tracker of Megatron-LM's"),
        ({"cur_scale": 8.0}, "it lacks cur_iter, last_overflow_iter, cur_hysteresis of DeepSpeed's"),
        ({"scaling": 8.0}, "its scaler state is none of GradScaler's state_dict(), DeepSpeed's"),
        # apex amp's loss scaler holds a loss_scale too: not read as fairseq's.
        ({"loss_scale": 8.0, "unskipped": 3}, "its scaler state is none of GradScaler's state_dict()"),
    ],
)
def test_a_saved_scaler_of_no_rule_is_one_line(tmp_path, entry, message):
    with pytest.raises(CheckpointError) as caught:
        save_and_read(tmp_path, entry)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_saved_scaler_that_cannot_go_on_as_a_setting_of_its_rule_is_not_continued(tmp_path):
    """A scale no config of the framework can write (DeepSpeed clamped at a minimum that is no power of
    two; fairseq below 1), or a state that does not fit the knobs taken at their defaults (a Megatron-LM
    scale below the default floor): no setting stands for the run as it was, so it is not continued, and
    one note says why; given the floor, the same Megatron-LM state goes on."""
    cases = [
        (
            {"cur_scale": 3.0, "cur_iter": 9, "last_overflow_iter": 8, "cur_hysteresis": 1, "min_scale": 3},
            "the checkpoint's DeepSpeed scaler has scale 2^1.58, which initial_scale_power (a whole number"
            " >= 0) cannot write in DeepSpeed's config",
        ),
        (
            {"loss_scale": 0.5},
            "the checkpoint's fairseq scaler has scale 2^-1, which fp16_init_scale (a whole number >= 1)"
            " cannot write in fairseq's config",
        ),
        (
            {"scale": torch.tensor([0.25]), "growth_tracker": 3, "hysteresis_tracker": 1},
            "the checkpoint's Megatron-LM scaler cannot go on (min_loss_scale, loss_scale_window, hysteresis"
            " at Megatron-LM's defaults): min_loss_scale must be in (0, initial_loss_scale], got 1.0",
        ),
    ]
    for entry, message in cases:
        start, rule = save_and_read(tmp_path, entry)
        assert rule is not None and start.scaler_setting() is None and start.scaler_assumed() == ""
        afresh = "it is not continued: every run starts its scaler afresh"
        assert start.scaler_unusable() == f"{message}; {afresh}"
    start, _ = save_and_read(tmp_path, cases[2][0] | {"min_loss_scale": 0.125})
    assert start.scaler_unusable() == "" and start.scaler_setting().values["initial_loss_scale"] == 0.25

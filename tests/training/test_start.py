"""Trials from a checkpoint, against a plain PyTorch loop that saves one and another that loads it and goes
on.

The plain loops (:mod:`plain_resume`) share nothing with the trainer but the Problem they read: they draw
the batch order themselves (``randperm(n)`` per epoch from ``shuffle_seed``), save and load with
``torch.save``/``load_state_dict``, and step the scheduler as the task says.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import pytest
import torch
from torch import nn

from search.scalers import ScalerConfig
from search.tasks import CheckpointError, Problem, read_checkpoint, start_from
from search.training import train

from plain_loop import _batches
from plain_resume import PlainSteps, assert_same_steps, loaded, plain_steps, write_content

# The plain loops and Lightning step the scheduler after a skipped first step, as PyTorch's recipe does.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
SAVED_AT = (
    23  # The checkpoint's global step: inside the second epoch (16 steps an epoch), mid warm-up's decay.
)
RUN = 12
# Not powers of two; 3.3e6 overflows seed-style gradients at first, and regrowing every 3 clean steps by 1.7
# brings the overflows back, so skips recur throughout and the scheduler's rule on them matters.
SAVING = dict(init_scale=3.3e6, growth_factor=1.7, backoff_factor=0.37, growth_interval=3)
TRIAL = ScalerConfig(5.1e5, 1.9, 0.43, 2)


def warmup_then_decay(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    # A callable object, not a lambda: LambdaLR saves a callable object's state; any scheduler would do.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupDecay(8, 60))


@dataclass
class WarmupDecay:
    warmup: int
    total: int

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.05, 1 - (step - self.warmup) / (self.total - self.warmup))


def problem_with_dropout(on_skip: bool | None = None) -> Problem:
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(2048, 16, generator=generator)
    targets = (inputs[:, 0] * 2 + inputs[:, 1] * 1.5 > 0).long()
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 2))
    return Problem(
        model=model,
        inputs=inputs,
        targets=targets,
        loss_fn=nn.CrossEntropyLoss(),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01),
        epochs=4,
        batch_size=128,
        shuffle_seed=11,
        make_scheduler=warmup_then_decay,
        scheduler_on_skipped_step=on_skip,
    )


def tensor_losses(problem: Problem, first: int, count: int) -> list:
    """The loss of each of global steps ``first`` ... ``first + count - 1`` (the plain loop's own batches)."""
    plan = _batches(problem, first + count)[first:]
    x, y = problem.inputs, problem.targets
    return [lambda model, i=index: problem.loss_fn(model(x[i]), y[i]) for (index,) in plan]


def save_plain_checkpoint(problem: Problem, path, on_skip: bool = True) -> PlainSteps:
    """Trains SAVED_AT steps from the initial weights in the plain loop; saves them as a torch.save dict."""
    model = copy.deepcopy(problem.model)
    optimizer = problem.make_optimizer(model.parameters())
    scheduler = problem.make_scheduler(optimizer)
    scaler = torch.amp.GradScaler("cpu", **SAVING)
    losses = tensor_losses(problem, 0, SAVED_AT)
    done = plain_steps(model, optimizer, scheduler, scaler, losses, 0, problem.shuffle_seed, on_skip)
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "step": SAVED_AT,
        },
        path,
    )
    return done


def plain_continue(problem: Problem, path, scaler: torch.amp.GradScaler | None, on_skip: bool) -> PlainSteps:
    """Loads the checkpoint into a fresh model, optimizer and scheduler and trains RUN more steps; ``scaler``
    None continues the saved scaler (as the run was)."""
    saved = torch.load(path, weights_only=True)
    states = tuple(saved[k] for k in ("model", "optimizer", "scheduler", "scaler"))
    model, optimizer, scheduler, scaler = loaded(
        copy.deepcopy(problem.model), problem.make_optimizer, problem.make_scheduler, states, scaler
    )
    losses = tensor_losses(problem, SAVED_AT, RUN)
    return plain_steps(model, optimizer, scheduler, scaler, losses, SAVED_AT, problem.shuffle_seed, on_skip)


@pytest.mark.parametrize("on_skip", [True, False])
def test_a_trial_continues_the_checkpoint_as_the_plain_loop_does(tmp_path, on_skip):
    """A fresh scaler at the trial's setting (a restart with new settings), and the saved one continued (as
    the run was): the same losses, scales, skips and learning rate per step as the plain loop that loads the
    checkpoint; the scheduler steps on skipped steps or not as the task says."""
    problem = problem_with_dropout(on_skip)
    path = tmp_path / "run.pt"
    before = save_plain_checkpoint(problem, path, on_skip)
    start = read_checkpoint(path)
    assert (start.global_step, start.source, start.scheduler_on_skipped_step) == (
        SAVED_AT,
        "torch.save checkpoint",
        None,
    )
    continued = start_from(problem, start)

    fresh = train(continued, TRIAL, steps=RUN, fp32_reference=False)
    plain = plain_continue(problem, path, torch.amp.GradScaler("cpu", **TRIAL.values), on_skip)
    assert_same_steps(fresh, plain, SAVED_AT)
    assert any(plain.skipped) and not all(plain.skipped)

    as_run = train(continued, start.scaler_setting(), steps=RUN, fp32_reference=False, continue_scaler=True)
    plain_as_run = plain_continue(problem, path, None, on_skip)
    assert_same_steps(as_run, plain_as_run, SAVED_AT)
    # The saved scaler is where the run left it, not at a fresh start: its count of clean steps goes on too.
    assert (
        start.scaler_state["scale"] == before.scales[-1]
        and start.scaler_setting().init_scale == before.scales[-1]
    )


def test_the_schedule_rule_moves_the_rate_only_on_skipped_steps():
    """The two rules give the same rates up to the first skipped step after the start, then differ: the
    recipe's schedule runs ahead by one step per skip."""
    every, taken_only = (
        train(problem_with_dropout(rule), TRIAL, steps=RUN, fp32_reference=False) for rule in (True, False)
    )
    first_skip = every.skipped.index(True)
    assert every.lr_curve[: first_skip + 1] == taken_only.lr_curve[: first_skip + 1]
    assert every.lr_curve[first_skip + 1] != taken_only.lr_curve[first_skip + 1]


def test_a_checkpoint_that_does_not_fit_the_model_is_one_line(tmp_path):
    problem = problem_with_dropout()
    saved = {"model": problem.model.state_dict(), "step": 5}
    saved["model"] = dict(saved["model"]) | {"4.weight": torch.zeros(3, 3)}
    del saved["model"]["0.bias"]
    saved["model"]["3.weight"] = torch.zeros(2, 65)
    torch.save(saved, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError) as e:
        start_from(problem, read_checkpoint(tmp_path / "bad.pt"))
    assert str(e.value) == (
        f"torch.save checkpoint {tmp_path / 'bad.pt'} does not fit the task's model: missing 0.bias; extra"
        " 4.weight; other shapes: 3.weight (2, 65) for (2, 64)"
    )


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file or directory"),
        (b"not a checkpoint", "cannot be read (UnpicklingError: "),
        ({"model": {}}, "a torch.save dict needs the keys model, step (and optionally optimizer, scheduler,"),
        ({"model": {}, "step": -3}, "its step is -3, not a whole number >= 0"),
        ([1, 2], "holds a list, not a dict of states"),
    ],
)
def test_unreadable_checkpoints_are_one_line(tmp_path, content, message):
    path = tmp_path / "ckpt.pt"
    write_content(path, content)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_fingerprint_and_fp32_reference_follow_the_start(tmp_path):
    """A study from the checkpoint is another problem (its fingerprint differs), and the fp32 reference and
    the initial evaluation are those of the checkpoint's weights at its step."""
    problem = problem_with_dropout()
    save_plain_checkpoint(problem, tmp_path / "run.pt")
    continued = start_from(problem, read_checkpoint(tmp_path / "run.pt"))
    assert continued.fingerprint() != problem.fingerprint()
    assert continued.fingerprint() == start_from(problem, read_checkpoint(tmp_path / "run.pt")).fingerprint()
    result = train(continued, TRIAL, steps=RUN)
    saved = torch.load(tmp_path / "run.pt", weights_only=True)
    model = copy.deepcopy(problem.model)
    model.load_state_dict(saved["model"])
    model.eval()
    with torch.no_grad():
        initial = problem.loss_fn(model(problem.inputs).float(), problem.targets).item()
    assert result.initial_eval_loss == pytest.approx(initial, rel=1e-6)
    assert math.isfinite(result.fp32_zero_fraction)
    assert replace(continued, start=None).fingerprint() != continued.fingerprint()  # the weights differ


def test_the_record_holds_each_steps_rate_and_the_first_step_and_the_figures_draw_them(tmp_path):
    """A trial from a checkpoint of a scheduled task stores the rate of each step (the plain loop's) and its
    first global step; the curves figure numbers its steps as the run does and draws the rate under the
    scale. A task with a constant rate stores neither."""
    import optuna

    from search.core import DEFAULTS, FIRST_STEP, LR_CURVE
    from search.publishing import curves_figure
    from search.training import run_trial

    problem = problem_with_dropout(True)
    save_plain_checkpoint(problem, tmp_path / "run.pt")
    continued = start_from(problem, read_checkpoint(tmp_path / "run.pt"))
    kwargs = dict(steps=RUN, amp_dtype=torch.float16, penalty=DEFAULTS.penalty, device_label="cpu")
    out = run_trial(continued, TRIAL, **kwargs)
    plain = plain_continue(problem, tmp_path / "run.pt", torch.amp.GradScaler("cpu", **TRIAL.values), True)
    assert out.user_attrs[LR_CURVE] == plain.rates and out.user_attrs[FIRST_STEP] == SAVED_AT
    trial = optuna.trial.create_trial(value=out.value, params={}, distributions={}, user_attrs=out.user_attrs)
    figure = curves_figure([("from the checkpoint", trial)], DEFAULTS.space)
    rate_traces = [t for t in figure.data if t.yaxis == "y3"]
    assert len(rate_traces) == 1 and list(rate_traces[0].y) == plain.rates
    assert list(rate_traces[0].x) == list(range(SAVED_AT + 1, SAVED_AT + RUN + 1))
    assert figure.data[0].x[0] == SAVED_AT + 1

    constant = run_trial(replace(problem, make_scheduler=None), TRIAL, **kwargs)
    assert LR_CURVE not in constant.user_attrs and FIRST_STEP not in constant.user_attrs

"""Where trials start: the state of the user's run at one of its checkpoints.

Loss-scale trouble rarely shows at step 0: gradients shrink as a model learns, spike when the learning
rate peaks, and a restart begins its scaler again at 2^16. A :class:`StartState` lets every trial
continue the user's run from a checkpoint instead of from the initial weights.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch
from torch import nn

from search.scalers import (
    RULES,
    RuleSetting,
    ScalerConfig,
    ScalerRule,
    as_mapping,
    format_scale,
    saved_rule,
)
from search.tasks._resolve import TaskError


class CheckpointError(TaskError):
    """A checkpoint that cannot be read, or that does not fit the task's model."""


@dataclass(frozen=True, eq=False)
class StartState:
    """The state of a run at one of its checkpoints, from which every trial continues.

    Every trial loads the same state, as every trial otherwise starts from the same initial weights
    (common random numbers): the model's weights, the optimizer's state (Adam's moments and step
    counts), the learning-rate scheduler's state and the global step, so the schedule, the order of the
    batches and each step's seed go on from there. The scaler's own state (GradScaler's scale and count of
    clean steps, or a framework's scale and counters) is what the baseline "as the run was" continues with;
    every other trial starts its scaler afresh at its setting, as a restart with new settings does.

    Example:
        ::

            from search.tasks import read_checkpoint

            start = read_checkpoint("runs/bert/checkpoint-2900")
            print(start.global_step, start.scaler_state["scale"])

    Args:
        model_state: The model's ``state_dict``.
        global_step: Optimizer steps the run had taken (skipped ones included) when it was saved.
        optimizer_state: The optimizer's ``state_dict``, or None (trials start it fresh).
        scheduler_state: The learning-rate scheduler's ``state_dict``, or None.
        scaler_state: The run's scaler as its framework saved it, or None where the run saved none:
            ``GradScaler.state_dict()``, DeepSpeed's ``DynamicLossScaler`` (the object ZeRO pickles, or its
            attributes), Megatron-LM's ``DynamicGradScaler.state_dict()`` or fairseq's ``{"loss_scale": ...}``
            (:class:`~search.scalers.SavedState`); which one is told by its keys.
        source: What it was read as, for messages: ``Hugging Face Trainer checkpoint``, ...
        path: Where it was read from.
        scheduler_on_skipped_step: Whether the checkpoint's framework steps the scheduler on a step the
            scaler skipped (Hugging Face Trainer and accelerate do not; Lightning and PyTorch's AMP
            recipe do), or None where the format does not say (a task's own setting decides).
    """

    model_state: Mapping[str, torch.Tensor]
    global_step: int
    optimizer_state: dict[str, Any] | None = None
    scheduler_state: dict[str, Any] | None = None
    scaler_state: dict[str, Any] | None = None
    source: str = "checkpoint"
    path: str = ""
    scheduler_on_skipped_step: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.global_step, int) or self.global_step < 0:
            raise CheckpointError(
                f"{self.where}: its step must be a whole number >= 0, got {self.global_step!r}"
            )
        if self.scaler_state is not None:
            state = as_mapping(self.scaler_state)
            if state is None or saved_rule(state) is None:
                raise CheckpointError(f"{self.where}: {_unknown_scaler(state)}")
            object.__setattr__(self, "scaler_state", dict(state))

    @property
    def where(self) -> str:
        """The checkpoint as messages name it: ``Hugging Face Trainer checkpoint runs/x/checkpoint-300``."""
        return f"{self.source} {self.path}".strip()

    def first_line(self, steps: int) -> str:
        """The line a command starts with: which step of which checkpoint every run starts from."""
        return (
            f"from step {self.global_step} of {self.where}: every run trains steps {self.global_step} to"
            f" {self.global_step + steps - 1}"
        )

    def digest(self) -> str:
        """A hash of the whole state: every worker and resume can prove it starts from the same one."""
        digest = hashlib.sha256(repr(self.global_step).encode())
        for part in (self.model_state, self.optimizer_state, self.scheduler_state, self.scaler_state):
            _hash_state(digest, part)
        return digest.hexdigest()[:16]

    @property
    def scaler_rule(self) -> ScalerRule | None:
        """The rule whose scaler the checkpoint saved, or None where it saved none."""
        return None if self.scaler_state is None else saved_rule(self.scaler_state)

    def scaler_setting(self) -> ScalerConfig | RuleSetting | None:
        """The setting the saved scaler trains on from where it was (its scale as the rule's start,
        GradScaler's ``init_scale``), or None where the checkpoint saved no scaler, or one that cannot go on
        (:meth:`scaler_unusable`)."""
        rule = self.scaler_rule
        if rule is None or self.scaler_state is None or self.scaler_unusable():
            return None
        return rule.setting(rule.saved_setting(self.scaler_state)[0])

    def scaler_unusable(self) -> str:
        """Where the saved scaler cannot be continued as a setting of its rule, the words that say why and
        that every run starts its scaler afresh; else "". Its scale or a knob may be no value the framework's
        config accepts (a DeepSpeed scale clamped at a minimum that is no power of two, a fairseq scale below
        1), or its state may not fit the knobs taken at their defaults (a Megatron-LM scale below the default
        floor)."""
        rule = self.scaler_rule
        if rule is None or self.scaler_state is None:
            return ""
        values, assumed = rule.saved_setting(self.scaler_state)
        afresh = "it is not continued: every run starts its scaler afresh"
        for knob in rule.knobs:
            if not knob.valid(values[knob.name]):
                what = f"scale {format_scale(rule.saved_scale(self.scaler_state))}"
                what = what if knob.name == rule.start_knob else f"{knob.name} {values[knob.name]:g}"
                return (
                    f"the checkpoint's {rule.title} scaler has {what}, which {knob.name} ({knob.rule}) cannot"
                    f" write in {rule.title}'s config; {afresh}"
                )
        try:
            rule.resumed(values, self.scaler_state)
        except ValueError as e:
            defaults = f" ({', '.join(assumed)} at {rule.maker}'s defaults)" if assumed else ""
            return f"the checkpoint's {rule.title} scaler cannot go on{defaults}: {e}; {afresh}"
        return ""

    def other_rule(self, rule: str) -> str:
        """Where the checkpoint saved the scaler of another rule than ``rule`` (a ``--scaler`` name), the
        words that say runs under ``rule`` start their scaler afresh; else ""."""
        saved = self.scaler_rule
        if saved is None or saved.name == rule:
            return ""
        return (
            f"the checkpoint saved {saved.title}'s scaler state, and these runs follow {RULES[rule].title}'s"
            " rule: its scaler starts afresh"
        )

    def scaler_assumed(self) -> str:
        """Where the saved scaler holds not all of its rule's knobs, the words that say which ones are taken
        at the framework's defaults; else ""."""
        rule = self.scaler_rule
        if rule is None or self.scaler_state is None or self.scaler_unusable():
            return ""
        assumed = rule.saved_setting(self.scaler_state)[1]
        if not assumed:
            return ""
        return (
            f"the checkpoint's {rule.title} scaler holds no {', '.join(assumed)}: taken at {rule.maker}'s"
            f" defaults (add them to its scaler entry under these names where the run set them)"
        )

    def fresh_optimizer_state(self) -> dict[str, Any] | None:
        """A deep copy of the optimizer state: ``Optimizer.load_state_dict`` keeps tensors already on the
        parameters' device and dtype as they are, and the optimizer then updates them in place."""
        return copy.deepcopy(self.optimizer_state)


ProblemT = TypeVar("ProblemT")


def start_from(problem: ProblemT, start: StartState) -> ProblemT:
    """``problem`` with its model holding the checkpoint's weights and its trials continuing from ``start``.

    Raises:
        CheckpointError: The checkpoint's weights do not fit the model (missing or extra keys, other shapes),
            or its optimizer's or scheduler's state does not fit the task's (checked here, once, rather than
            failing every trial).
    """
    model = copy.deepcopy(problem.model)
    tied = check_fits(model, start)
    model.load_state_dict(start.model_state, strict=not tied)
    _check_states(problem, model, start)
    return replace(problem, model=model, start=start)


def _check_states(problem: Any, model: nn.Module, start: StartState) -> None:
    """Loads the optimizer's and the scheduler's states into the task's own, on a copy of the model."""
    if start.scheduler_state is not None and problem.make_scheduler is None:
        raise CheckpointError(
            f"{start.where} holds a learning-rate scheduler's state and the task has none: give the task"
            " make_scheduler=..., the schedule the run used"
        )
    if start.scheduler_state is None and problem.make_scheduler is not None:
        raise CheckpointError(
            f"{start.where} holds no scheduler state, so where the task's schedule was at step"
            f" {start.global_step} is unknown: save the scheduler's state_dict with the checkpoint"
        )
    what = "optimizer"
    try:
        optimizer = problem.make_optimizer(copy.deepcopy(model).parameters())
        scheduler = None if problem.make_scheduler is None else problem.make_scheduler(optimizer)
        if start.optimizer_state is not None:
            optimizer.load_state_dict(start.fresh_optimizer_state())
        what = "scheduler"
        if scheduler is not None:
            scheduler.load_state_dict(dict(start.scheduler_state))
    except Exception as e:  # Whatever load_state_dict raises (ValueError, KeyError, ...): one line.
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise CheckpointError(f"{start.where}: its {what} state does not fit the task's {what}: {first}")


def check_fits(model: nn.Module, start: StartState) -> set[str]:
    """Refuses a checkpoint whose weights are not the model's: one line naming what differs.

    Returns the model's tied weights the checkpoint leaves out (``save_pretrained`` writes an LM head tied
    to the embedding once): they are loaded through the weight they share memory with.
    """
    own = model.state_dict()
    theirs = start.model_state
    present = {own[k].data_ptr() for k in own if k in theirs}
    tied = {k for k in own if k not in theirs and own[k].numel() and own[k].data_ptr() in present}
    missing = [k for k in own if k not in theirs and k not in tied]
    extra = [k for k in theirs if k not in own]
    shapes = [
        f"{k} {tuple(theirs[k].shape)} for {tuple(own[k].shape)}"
        for k in own
        if k in theirs and isinstance(theirs[k], torch.Tensor) and theirs[k].shape != own[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {_few(missing)}")
    if extra:
        problems.append(f"extra {_few(extra)}")
    if shapes:
        problems.append(f"other shapes: {_few(shapes)}")
    if problems:
        raise CheckpointError(f"{start.where} does not fit the task's model: {'; '.join(problems)}")
    return tied


def _unknown_scaler(state: Mapping[str, Any] | None) -> str:
    """Why a saved scaler is none of the rules': the keys the nearest one lacks, or what the four hold."""
    if state is not None:
        rules = [r for r in RULES.values() if r.saved is not None]
        nearest = max(rules, key=lambda r: sum(k in state for k in r.saved.keys))  # type: ignore[union-attr]
        held = [k for k in nearest.saved.keys if k in state]  # type: ignore[union-attr]
        lacking = [k for k in nearest.saved.keys if k not in state]  # type: ignore[union-attr]
        if held and lacking:
            return (
                f"its scaler state is no saved scaler this reads: it lacks {', '.join(lacking)} of"
                f" {nearest.title}'s"
            )
    return (
        "its scaler state is none of GradScaler's state_dict(), DeepSpeed's DynamicLossScaler, Megatron-LM's"
        " DynamicGradScaler.state_dict() or fairseq's {'loss_scale': ...}"
    )


def _few(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _hash_state(digest: Any, state: Any) -> None:
    if isinstance(state, torch.Tensor):
        digest.update(str(state.dtype).encode())
        digest.update(state.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(state, Mapping):
        for key in sorted(state, key=str):
            digest.update(repr(key).encode())
            _hash_state(digest, state[key])
    elif isinstance(state, (list, tuple)):
        digest.update(b"[")
        for item in state:
            _hash_state(digest, item)
    else:
        digest.update(repr(state).encode())

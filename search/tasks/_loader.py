"""A training problem given as batches, the way a training script holds it: a DataLoader and a loss.

:class:`~search.tasks.base.Problem` holds the whole data set as two tensors; most training scripts
hold a ``DataLoader`` whose batches are tuples or dicts (``input_ids``, ``attention_mask``,
``labels``) and a loss the model may compute itself (``model(**batch).loss``). A
:class:`LoaderProblem` takes those as they are.

Common random numbers still hold: the batches of a trial's steps are drawn **once per process**,
with the global RNG seeded from :attr:`LoaderProblem.seed` (so the loader's shuffling, its
collate's randomness such as MLM masking, and its workers' seeds are the same in every process on
the same torch build), kept, moved to the device once, and fed identically to every trial. Their
bytes are part of the study's fingerprint, so a worker or a resume whose data differ is refused.
Randomness inside a step (dropout) is seeded per step by the trainer, identically in every trial.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from search.tasks._start import StartState
from search.tasks.base import LossFn, OptimizerFactory, SchedulerFactory

Batch = Any  # A tensor, or a tuple, list or dict of them, nested to any depth.
BatchLoss = Callable[[nn.Module, Batch], torch.Tensor]
Batches = Iterable[Batch] | Callable[[], Iterable[Batch]]


class BatchError(ValueError):
    """The batches or the loss of a :class:`LoaderProblem` cannot be used as given."""


@dataclass(frozen=True, eq=False)
class LoaderProblem:
    """One fixed training problem given as batches: a model, a DataLoader (or any iterable), a loss.

    Example:
        A Hugging Face causal LM trained from a DataLoader whose collate returns dicts::

            def build(seed):
                torch.manual_seed(seed)
                model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256))
                loader = DataLoader(texts(seed), batch_size=32, shuffle=True, collate_fn=collate)
                return LoaderProblem(model, loader, lambda p: torch.optim.AdamW(p, lr=1e-3), steps=64)

        ``model(**batch).loss`` is the loss; no wrapper, no loss of your own.

    Args:
        model: The model with its initial weights; never trained in place (every trial trains a
            copy, buffers such as BatchNorm's running statistics included).
        train_batches: The training batches: a DataLoader or other iterable that can be iterated
            again (each pass is an epoch), or a callable returning a fresh iterable.
        make_optimizer: Builds a fresh optimizer over the trial's model parameters.
        steps: Optimizer steps of a trial (``--steps`` overrides it).
        loss: ``loss(model, batch)`` returning the loss as a one-element tensor. None: a dict batch
            calls ``model(**batch)`` and takes its ``.loss`` (or ``["loss"]``); an ``(inputs,
            targets)`` batch uses ``loss_fn(model(inputs), targets)``.
        loss_fn: ``loss_fn(outputs, targets)`` for ``(inputs, targets)`` batches (when ``loss`` is None).
        eval_batches: Validation batches every trial's final weights are judged on (iterated once,
            kept); None judges them on the training batches of one pass (at most a trial's).
        eval_loss: ``eval_loss(model, batch)`` for the evaluation (lower is better); None uses the
            training loss. Taken in fp32, without autocast, in eval mode, under ``no_grad``.
        accumulation_steps: Batches whose gradients are accumulated per optimizer step.
        grad_clip: Max global gradient norm (``clip_grad_norm_`` after ``scaler.unscale_``), or None.
        seed: Seeds drawing the batches and each step's randomness, the same in every trial.
        run_steps: The optimizer steps of the real run this task stands for, or None (as
            :attr:`search.tasks.Problem.run_steps`).
        make_scheduler: The learning-rate scheduler's factory, or None (as
            :attr:`search.tasks.Problem.make_scheduler`).
        scheduler_on_skipped_step: Whether it steps on skipped steps (as the Problem's field).
        start: The checkpoint every trial continues from, or None (as :attr:`search.tasks.Problem.start`):
            a trial from step G trains the batches of steps G, G+1, ... of the planned order.
    """

    model: nn.Module
    train_batches: Batches
    make_optimizer: OptimizerFactory
    steps: int
    loss: BatchLoss | None = None
    loss_fn: LossFn | None = None
    eval_batches: Batches | None = None
    eval_loss: BatchLoss | None = None
    accumulation_steps: int = 1
    grad_clip: float | None = None
    seed: int = 0
    run_steps: int | None = None
    make_scheduler: SchedulerFactory | None = None
    scheduler_on_skipped_step: bool | None = None
    start: StartState | None = None
    device: torch.device | None = field(default=None, repr=False)
    _drawn: dict[str, Any] = field(default_factory=dict, repr=False)  # Batches drawn, per use.

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.run_steps is not None and self.run_steps < 1:
            raise ValueError(f"run_steps must be >= 1 or None, got {self.run_steps}")
        if self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {self.accumulation_steps}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")

    @property
    def epochs(self) -> int:
        """Not a unit of a loader task (its length may be unknown): trials run :attr:`steps`."""
        return 0

    def to(self, device: torch.device) -> LoaderProblem:
        """A copy with the model, and the batches once drawn, on ``device``; ``self`` is unchanged."""
        moved = replace(
            self, model=copy.deepcopy(self.model).to(device), device=torch.device(device), _drawn={}
        )
        for key, batches in self._drawn.items():  # Drawn once per process, moved once.
            moved._drawn[key] = to_device(batches, moved.device)
        return moved

    def loss_of(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The training loss of ``model`` on one batch (see ``loss``)."""
        if self.loss is not None:
            return self.loss(model, batch)
        if isinstance(batch, Mapping):
            output = model(**batch)
            loss = getattr(output, "loss", None)
            if loss is None and isinstance(output, Mapping):
                loss = output.get("loss")
            if loss is None:
                raise BatchError(
                    f"model(**batch) returned {type(output).__name__} without a loss (a Hugging Face model"
                    " computes one when the batch has labels): give the batch labels, or"
                    " LoaderProblem(loss=...)"
                )
            return loss
        if isinstance(batch, Sequence) and len(batch) == 2 and self.loss_fn is not None:
            return self.loss_fn(model(batch[0]), batch[1])
        raise BatchError(
            f"a {type(batch).__name__} batch and no loss: give LoaderProblem(loss=lambda model, batch: ...), "
            "or loss_fn=... for (inputs, targets) batches"
        )

    def eval_loss_of(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The evaluation loss of ``model`` on one batch, as a float32 tensor (see ``eval_loss``)."""
        loss = self.eval_loss(model, batch) if self.eval_loss is not None else self.loss_of(model, batch)
        return loss.float()

    def planned(self, steps: int, first: int = 0) -> list[list[Batch]]:
        """The micro-batches of each of ``steps`` optimizer steps from step ``first``, drawn once (then kept)
        on :attr:`device`; the batches of the steps before ``first`` are drawn but not kept."""
        per = self.accumulation_steps
        drawn = self._draw("train", self.train_batches, (first + steps) * per, cycle=True, skip=first * per)
        return [drawn[i * per : (i + 1) * per] for i in range(steps)]

    def evaluation_batches(self, steps: int | None = None) -> list[Batch]:
        """The batches every trial is judged on: ``eval_batches``, else the training batches of one pass
        (at most those of ``steps`` steps; None: those drawn for the trials, which are drawn first)."""
        if self.eval_batches is not None:
            return self._draw("eval", self.eval_batches, None, cycle=False)
        first = 0 if self.start is None else self.start.global_step  # The trials' own batches, from there.
        key = f"train@{first * self.accumulation_steps}" if first else "train"
        if steps is not None:
            self.planned(steps, first)
        if key not in self._drawn:
            raise BatchError("no training batches drawn yet: the trials' steps decide which ones judge them")
        drawn = self._drawn[key]
        return drawn[: self._drawn.get("train_pass", len(drawn))]

    def fingerprint(self, steps: int) -> str:
        """A short hash of the initial weights, the batches of ``steps`` steps, the evaluation batches
        and how they are trained: equal in every process that trains the same problem."""
        digest = hashlib.sha256(repr((self.accumulation_steps, self.grad_clip, self.seed)).encode())
        for tensor in self.model.state_dict().values():
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        first = 0
        if self.start is not None:
            digest.update(f"start {self.start.digest()}".encode())
            first = self.start.global_step
        for step in self.planned(steps, first):
            for batch in step:
                _hash_batch(digest, batch)
        digest.update(b"eval")
        for batch in self.evaluation_batches(steps):
            _hash_batch(digest, batch)
        return digest.hexdigest()[:16]

    def planned_bytes(self, steps: int) -> int:
        """Bytes the batches of ``steps`` steps (from the start's step) and the evaluation take, held once per
        process."""
        train = self.planned(steps, 0 if self.start is None else self.start.global_step)
        batches = [b for step in train for b in step] + list(self.evaluation_batches(steps))
        return sum(t.numel() * t.element_size() for b in batches for t in tensors_of(b))

    def _draw(self, key: str, source: Batches, count: int | None, cycle: bool, skip: int = 0) -> list[Batch]:
        """``count`` batches of ``source`` (all of one pass when None), drawn with the RNG seeded. The first
        ``skip`` are drawn, so that the order is the run's, but not kept (a run from a checkpoint's step)."""
        key = f"{key}@{skip}" if skip else key
        kept = None if count is None else count - skip
        cached = self._drawn.get(key)
        if cached is not None and (kept is None or len(cached) >= kept):
            return cached if kept is None else cached[:kept]
        drawn: list[Batch] = []
        seen = 0
        with torch.random.fork_rng(devices=[]):  # The caller's RNG is left as it was.
            torch.manual_seed(self.seed)
            while count is None or seen < count:
                before = seen
                for batch in _iterate(source):
                    seen += 1
                    if seen > skip:
                        drawn.append(to_device(detached(batch), self.device))
                    if count is not None and seen >= count:
                        break
                if key.startswith("train") and before == 0:
                    self._drawn["train_pass"] = seen  # One pass of the loader: the evaluation's at most.
                if seen == before:
                    raise BatchError(
                        f"{key.split('@')[0]}_batches gave {'no' if not seen else f'only {seen}'} batches"
                        + (
                            f" of the {count} that {count // max(1, self.accumulation_steps)} steps need:"
                            " give a DataLoader or a callable returning a fresh iterable (a generator runs"
                            " once)"
                            if seen
                            else ""
                        )
                    )
                if count is None or not cycle:
                    break
        self._drawn[key] = drawn
        return drawn


def _iterate(source: Batches) -> Iterator[Batch]:
    if callable(source) and not hasattr(source, "__iter__"):
        return iter(source())
    return iter(source)


def tensors_of(batch: Batch) -> list[torch.Tensor]:
    """Every tensor in a batch, in a fixed order (dict keys sorted)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return [t for key in sorted(batch, key=str) for t in tensors_of(batch[key])]
    if isinstance(batch, (list, tuple)):
        return [t for item in batch for t in tensors_of(item)]
    return []


def _map(batch: Batch, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(
        batch, Mapping
    ):  # A plain dict whatever the mapping (BatchEncoding): model(**batch) takes it.
        return {k: _map(v, fn) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # A namedtuple.
        return type(batch)(*(_map(v, fn) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_map(v, fn) for v in batch)
    return batch


def detached(batch: Batch) -> Batch:
    """The batch with every tensor detached and cloned (a loader may reuse its buffers)."""
    return _map(batch, lambda t: t.detach().clone())


def to_device(batch: Batch, device: torch.device | None) -> Batch:
    """The batch with every tensor on ``device`` (None: where it is)."""
    return batch if device is None else _map(batch, lambda t: t.to(device))


def _hash_batch(digest: Any, batch: Batch) -> None:
    digest.update(_skeleton(batch).encode())
    for tensor in tensors_of(batch):
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _skeleton(batch: Batch) -> str:
    """The batch's structure without its values: keys, nesting, shapes."""
    if isinstance(batch, torch.Tensor):
        return f"T{tuple(batch.shape)}"
    if isinstance(batch, Mapping):
        return "{" + ",".join(f"{k}:{_skeleton(batch[k])}" for k in sorted(batch, key=str)) + "}"
    if isinstance(batch, (list, tuple)):
        return "[" + ",".join(_skeleton(v) for v in batch) + "]"
    return repr(batch)

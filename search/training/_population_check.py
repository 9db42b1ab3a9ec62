"""What population mode can train: the check, and the problem read into the plan the batched code runs.

:func:`~search.training._population.train_population` replays, for K members at once, the kernels
autograd and torch.optim call for one model under ``torch.autocast``; it can do that only for what it
has written out. This module says, in one line, what it cannot train (:class:`PopulationError`) and
otherwise reads the problem into a :class:`_Spec`:

* **the model**: an ``nn.Sequential`` of ``nn.Linear`` layers and elementwise activations (``ReLU``,
  ``Tanh``, ``Sigmoid``, ``GELU``, ``SiLU``, ``LeakyReLU``, ``Identity``), every parameter trained, no
  buffers, 2-D floating-point inputs, and every layer computing in the autocast dtype (run once on the
  first batch: the batched layers replay autocast's casts and nothing else);
* **the loss**: ``nn.MSELoss`` (``mean``/``sum``) and ``nn.CrossEntropyLoss`` (class indices, no
  weights, no label smoothing, no ignored targets) are vectorised; any other loss is ``"generic"``
  (called once per member, see :mod:`search.training._population_model`);
* **the optimizer**: the hyperparameters of the instance the task's ``make_optimizer`` returns over a
  throwaway copy of the parameters: ``torch.optim.SGD``, ``Adam`` or ``AdamW``, one parameter group
  holding every parameter in ``model.parameters()`` order, no capturable/differentiable/fused option,
  no tensor hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from search.tasks import LoaderProblem, Problem

_ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.GELU,
    nn.SiLU,
    nn.LeakyReLU,
    nn.Identity,
)


class PopulationError(ValueError):
    """A task, model, loss or optimizer that population mode cannot vectorise (one line: what and why)."""


@dataclass(frozen=True)
class _Layer:
    """One module of the Sequential: a linear layer (indices into the parameter list) or an activation."""

    kind: str  # "linear", "relu", "tanh", "sigmoid", "gelu", "silu", "leaky_relu", "identity"
    weight: int = -1
    bias: int = -1
    negative_slope: float = 0.01
    approximate: str = "none"


@dataclass(frozen=True)
class _Optimizer:
    """The hyperparameters of the task's optimizer, read from an instance of it."""

    kind: str  # "sgd" or "adam"
    lr: float
    weight_decay: float
    maximize: bool
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    amsgrad: bool = False
    decoupled: bool = False


@dataclass(frozen=True)
class _Spec:
    """What the batched code runs: the layer plan, the loss kind and the optimizer's hyperparameters."""

    layers: tuple[_Layer, ...]
    loss: str  # "mse_mean", "mse_sum", "cross_entropy" or "generic"
    optimizer: _Optimizer


def check_population(problem: Problem | LoaderProblem, amp_dtype: torch.dtype | None = torch.float16) -> None:
    """Raises :class:`PopulationError` (one line) if :func:`train_population` cannot train ``problem``.

    Checks the model (an ``nn.Sequential`` of ``nn.Linear`` and elementwise activations, no buffers),
    the inputs (2-D), the optimizer (SGD, Adam or AdamW, one group) and the autocast dtype, and runs the
    first batch through the model under autocast to check that every layer computes in ``amp_dtype``
    (the batched layers replay autocast's casts and nothing else).
    """
    _spec(problem, amp_dtype)


def _spec(problem: Problem, amp_dtype: torch.dtype | None) -> _Spec:
    """The problem read into a :class:`_Spec`; raises :class:`PopulationError` for what cannot be."""
    if amp_dtype not in (torch.float16, torch.bfloat16):
        raise PopulationError(f"population mode trains under autocast float16 or bfloat16, not {amp_dtype}")
    if isinstance(problem, LoaderProblem):
        raise PopulationError(
            "its batches come from a loader (LoaderProblem): population mode stacks a Problem of two tensors"
            " only"
        )
    if problem.start is not None or problem.make_scheduler is not None:
        raise PopulationError(
            "it continues a checkpoint or schedules its learning rate: population mode trains from the"
            " initial weights at a constant rate"
        )
    layers = _layers(problem.model)
    if problem.inputs.dim() != 2 or not problem.inputs.is_floating_point():
        raise PopulationError(
            f"inputs of shape {tuple(problem.inputs.shape)}: population mode needs 2-D floating-point inputs"
        )
    optimizer = _optimizer(problem)
    # Autocast must run every layer in amp_dtype (true of Linear and these activations on CPU and CUDA;
    # checked rather than assumed), since the batched layers replay that and nothing else.
    size = problem.batch_size or len(problem.inputs)
    device_type = problem.inputs.device.type
    with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
        h = problem.inputs[:size]
        for position, module in enumerate(problem.model):
            h = module(h)
            if h.dtype != amp_dtype:
                raise PopulationError(
                    f"layer {position} ({type(module).__name__}) computes in {h.dtype} under autocast, not"
                    f" {amp_dtype}"
                )
    last = problem.model[[i for i, layer in enumerate(layers) if layer.kind == "linear"][-1]]
    return _Spec(layers, _loss_kind(problem, last.out_features), optimizer)


def _layers(model: nn.Module) -> tuple[_Layer, ...]:
    """The layer plan of ``model``, with each linear layer's indices into ``model.parameters()``."""
    name = type(model).__name__
    if type(model) is not nn.Sequential:
        raise PopulationError(
            f"model {name} is not an nn.Sequential of nn.Linear layers and elementwise activations"
        )
    if any(True for _ in model.buffers()):
        raise PopulationError(
            "model has buffers (e.g. BatchNorm running statistics); population mode needs parameters only"
        )
    layers: list[_Layer] = []
    index = 0
    for position, module in enumerate(model):
        if type(module) is nn.Linear:
            layers.append(_Layer("linear", weight=index, bias=index + 1 if module.bias is not None else -1))
            index += 2 if module.bias is not None else 1
        elif type(module) in _ACTIVATIONS:
            if position == 0:
                raise PopulationError(
                    f"model starts with {type(module).__name__}; population mode needs an nn.Linear first"
                )
            kind = {
                nn.ReLU: "relu",
                nn.Tanh: "tanh",
                nn.Sigmoid: "sigmoid",
                nn.GELU: "gelu",
                nn.SiLU: "silu",
                nn.LeakyReLU: "leaky_relu",
                nn.Identity: "identity",
            }[type(module)]
            layers.append(
                _Layer(
                    kind,
                    negative_slope=getattr(module, "negative_slope", 0.01),
                    approximate=getattr(module, "approximate", "none"),
                )
            )
        else:
            raise PopulationError(
                f"model layer {position} is {type(module).__name__}: population mode supports nn.Linear and "
                "elementwise activations (ReLU, Tanh, Sigmoid, GELU, SiLU, LeakyReLU, Identity)"
            )
    if not layers:
        raise PopulationError("model is an empty nn.Sequential")
    if sum(1 for _ in model.parameters()) != index:
        raise PopulationError("model has parameters outside its nn.Linear layers")
    if not all(p.requires_grad for p in model.parameters()):
        raise PopulationError(
            "model has frozen parameters (requires_grad=False); population mode trains every parameter"
        )
    return tuple(layers)


def _optimizer(problem: Problem) -> _Optimizer:
    """The hyperparameters of ``problem.make_optimizer``'s optimizer, read from an instance over copies."""
    params = [p.detach().clone().requires_grad_(True) for p in problem.model.parameters()]
    try:
        instance = problem.make_optimizer(params)
    except Exception as e:
        raise PopulationError(f"make_optimizer failed on a copy of the parameters: {type(e).__name__}: {e}")
    kind = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adam"}.get(type(instance))
    if kind is None:
        raise PopulationError(
            f"optimizer {type(instance).__name__} cannot be vectorised: population mode supports"
            " torch.optim.SGD, Adam and AdamW"
        )
    if len(instance.param_groups) != 1:
        raise PopulationError(
            f"optimizer has {len(instance.param_groups)} parameter groups; population mode needs one"
        )
    group = instance.param_groups[0]
    if len(group["params"]) != len(params) or any(a is not b for a, b in zip(group["params"], params)):
        raise PopulationError("optimizer does not hold every model parameter in model.parameters() order")
    for flag in ("capturable", "differentiable", "fused"):
        if group.get(flag):
            raise PopulationError(f"optimizer option {flag}=True cannot be vectorised")
    values = [
        group["lr"],
        group.get("weight_decay", 0.0),
        group.get("momentum", 0.0),
        group.get("dampening", 0.0),
    ]
    values += list(group.get("betas", ())) + [group.get("eps", 0.0)]
    if any(isinstance(v, torch.Tensor) for v in values):
        raise PopulationError("optimizer hyperparameters given as tensors cannot be vectorised; use floats")
    if kind == "sgd":
        return _Optimizer(
            "sgd",
            lr=float(group["lr"]),
            weight_decay=float(group["weight_decay"]),
            maximize=bool(group["maximize"]),
            momentum=float(group["momentum"]),
            dampening=float(group["dampening"]),
            nesterov=bool(group["nesterov"]),
        )
    beta1, beta2 = group["betas"]
    return _Optimizer(
        "adam",
        lr=float(group["lr"]),
        weight_decay=float(group["weight_decay"]),
        maximize=bool(group["maximize"]),
        beta1=float(beta1),
        beta2=float(beta2),
        eps=float(group["eps"]),
        amsgrad=bool(group["amsgrad"]),
        decoupled=bool(group.get("decoupled_weight_decay", False)),
    )


def _loss_kind(problem: Problem, out_features: int) -> str:
    """Which vectorised loss matches ``problem.loss_fn`` and its targets, or ``"generic"``."""
    loss_fn, targets = problem.loss_fn, problem.targets
    if type(loss_fn) is nn.MSELoss and loss_fn.reduction in ("mean", "sum"):
        if targets.dtype == torch.float32 and targets.dim() == 2 and targets.shape[1] == out_features:
            return "mse_" + loss_fn.reduction
    if type(loss_fn) is nn.CrossEntropyLoss and loss_fn.reduction == "mean" and loss_fn.weight is None:
        if loss_fn.label_smoothing == 0.0 and targets.dtype == torch.int64 and targets.dim() == 1:
            if not bool((targets == loss_fn.ignore_index).any()):
                return "cross_entropy"
    return "generic"

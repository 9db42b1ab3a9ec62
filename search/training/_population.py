"""Population mode: K GradScaler settings trained at once, in one process, on one :class:`Problem`.

A tiny model leaves an accelerator idle: one trial of the seed task is a few hundred kernel launches
of microseconds each. :func:`train_population` trains K copies of ``problem.model`` together, one per
:class:`~search.training._trainer.ScalerConfig`, and returns for each the :class:`~search.training._trainer.TrainResult`
that :func:`search.training._trainer.train` would have returned for that setting alone, so that
:func:`search.training._penalty.assess` gives the same verdict.

How the K members share the work:

* **Weights** are stacked: every ``nn.Linear`` weight becomes one fp32 tensor ``[K, out, in]``, every
  bias ``[K, out]``. The model must be an ``nn.Sequential`` of ``nn.Linear`` layers and elementwise
  activations (``ReLU``, ``Tanh``, ``Sigmoid``, ``GELU``, ``SiLU``, ``LeakyReLU``, ``Identity``);
  anything else raises :class:`PopulationError` (:func:`check_population` says so before training).
* **Forward and backward are written out by hand**, with the kernels autograd would call for one
  member under ``torch.autocast``: the fp32 master weights are cast to the autocast dtype, each layer is
  ``baddbmm(bias, input, weightᵀ)`` (the batched form of the ``addmm`` that ``F.linear`` calls), each
  activation's backward is its own ATen backward op (``threshold_backward``, ``tanh_backward``, ...),
  the weight gradient is ``bmm(gradᵀ, input)``, the bias gradient a sum over the batch, and the cast
  back to fp32 happens where autocast's cast does. ``torch.func.vmap`` is not used: under ``vmap``
  autocast does not apply, and the layers silently run in fp32.
* **The loss** runs in fp32 on the fp32 copy of the outputs, as autocast runs it. ``nn.MSELoss``
  (``mean``/``sum``) and ``nn.CrossEntropyLoss`` (class indices, no weights, no label smoothing) are
  vectorised with the formulas of their ATen backward kernels (``mse_loss_backward``: ``2/N * (x - y) *
  g``; ``nll_loss_backward`` then ``_log_softmax_backward_data``). Any other ``loss_fn`` is called once
  per member under autocast, on a leaf holding that member's outputs (exact, K small calls per
  micro-batch).
* **Loss scaling** follows ``torch.amp.GradScaler`` member by member. Member k's loss is multiplied by
  its own float32 scale ``s_k``, so its backward carries ``s_k``; ``found_inf[k]`` is set when any of
  member k's (accumulated, still scaled) fp32 gradients is inf or NaN (as
  ``_amp_foreach_non_finite_check_and_unscale_`` sets it); the gradients are multiplied by
  ``inv_scale_k = float32(1 / float64(s_k))`` (GradScaler computes the reciprocal in fp64); with
  ``problem.grad_clip`` they are clipped per member. Then, as ``_amp_update_scale_`` does for one
  scale: on ``found_inf`` ``s_k = float32(float64(s_k) * backoff_k)`` and the growth tracker drops to 0;
  otherwise the tracker counts one more good step and, when it reaches ``growth_interval_k``,
  ``s_k = float32(float64(s_k) * growth_k)`` unless that is inf in float32 (then the scale stays) and the
  tracker drops to 0. The product is taken in float64 and rounded once to float32, as the ATen kernel's
  ``float * double`` does; it is not the same as multiplying in float32.
* **The optimizer** is rebuilt from an instance the task's ``make_optimizer`` returns over a throwaway
  copy of the parameters: ``torch.optim.SGD`` (momentum, dampening, Nesterov, weight decay, maximize)
  or ``torch.optim.Adam``/``AdamW`` (betas, eps, weight decay, decoupled or not, AMSGrad, maximize),
  one parameter group. Its update is torch.optim's single-tensor update, op for op, on the stacked
  tensors (``lerp_``, ``mul_().addcmul_()``, ``sqrt() / bias_correction2_sqrt + eps``, ``addcdiv``), and
  every result passes through ``torch.where(step_taken[k], new, old)``: a member whose step
  GradScaler skips keeps its weights, momentum, moments and Adam step count bit for bit, like an
  optimizer whose ``step()`` was never called. Adam's bias corrections depend on each member's own
  count of taken steps; they are computed in Python floats for every count up front (as Adam computes
  them from ``step.item()``) and gathered per member on the device, so the loop reads the host only at
  the end (and at ``checkpoints``).

**Equivalence.** On the CPU build this was written on, every kernel above gives the same bits for a
member as the unbatched kernel gives for that member alone (``baddbmm``/``bmm`` in fp16 equal
``addmm``/``mm``; elementwise kernels are FMA-contracted on both their vector and scalar paths), and
``tests/test_population.py`` checks whole runs against :func:`search.training._trainer.train`: skipped steps,
scale curves and failure codes equal, losses within the tolerance measured there. Three things are
not the same kernels and may differ in the last bits: the loss *values* of the vectorised losses (a
reduction over one member's slice instead of the whole tensor; the gradients do not depend on it),
the per-member gradient norm of ``grad_clip`` (the clip coefficient, hence the weights), and on CUDA
the batched GEMMs and cuBLAS's choice of algorithm, which this CPU test cannot cover.

**Evaluation** uses :mod:`search.training._evaluation` unchanged, member by member, on a copy of the model that
holds the member's final weights: the same numbers :func:`search.training._trainer.train` computes, read to the
host once for all members.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from search.core import ScalerConfig
from search.tasks.base import Problem
from search.training._evaluation import (
    LAST_STEP,
    Evaluation,
    evaluation_mode,
    evaluation_of,
    evaluation_values,
    initial_evaluation,
)
from search.training._trainer import TrainResult, TrialTimeout, batch_plan, fp32_zero_fraction

__all__ = ["PopulationError", "check_population", "train_population"]

_ACTIVATIONS: tuple[type[nn.Module], ...] = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.Identity)


class PopulationError(ValueError):
    """A task, model, loss or optimizer that population mode cannot vectorise (one line: what and why)."""


# --------------------------------------------------------------------------------------------------
# What the problem is made of: the layer plan, the loss, the optimizer.


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
    layers: tuple[_Layer, ...]
    loss: str  # "mse_mean", "mse_sum", "cross_entropy" or "generic"
    optimizer: _Optimizer


def _layers(model: nn.Module) -> tuple[_Layer, ...]:
    name = type(model).__name__
    if type(model) is not nn.Sequential:
        raise PopulationError(f"model {name} is not an nn.Sequential of nn.Linear layers and elementwise activations")
    if any(True for _ in model.buffers()):
        raise PopulationError("model has buffers (e.g. BatchNorm running statistics); population mode needs parameters only")
    layers: list[_Layer] = []
    index = 0
    for position, module in enumerate(model):
        if type(module) is nn.Linear:
            layers.append(_Layer("linear", weight=index, bias=index + 1 if module.bias is not None else -1))
            index += 2 if module.bias is not None else 1
        elif type(module) in _ACTIVATIONS:
            if position == 0:
                raise PopulationError(f"model starts with {type(module).__name__}; population mode needs an nn.Linear first")
            kind = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.GELU: "gelu", nn.SiLU: "silu",
                    nn.LeakyReLU: "leaky_relu", nn.Identity: "identity"}[type(module)]
            layers.append(
                _Layer(kind, negative_slope=getattr(module, "negative_slope", 0.01), approximate=getattr(module, "approximate", "none"))
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
        raise PopulationError("model has frozen parameters (requires_grad=False); population mode trains every parameter")
    return tuple(layers)


def _optimizer(problem: Problem) -> _Optimizer:
    params = [p.detach().clone().requires_grad_(True) for p in problem.model.parameters()]
    try:
        instance = problem.make_optimizer(params)
    except Exception as e:
        raise PopulationError(f"make_optimizer failed on a copy of the parameters: {type(e).__name__}: {e}")
    kind = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adam"}.get(type(instance))
    if kind is None:
        raise PopulationError(
            f"optimizer {type(instance).__name__} cannot be vectorised: population mode supports torch.optim.SGD, Adam and AdamW"
        )
    if len(instance.param_groups) != 1:
        raise PopulationError(f"optimizer has {len(instance.param_groups)} parameter groups; population mode needs one")
    group = instance.param_groups[0]
    if len(group["params"]) != len(params) or any(a is not b for a, b in zip(group["params"], params)):
        raise PopulationError("optimizer does not hold every model parameter in model.parameters() order")
    for flag in ("capturable", "differentiable", "fused"):
        if group.get(flag):
            raise PopulationError(f"optimizer option {flag}=True cannot be vectorised")
    values = [group["lr"], group.get("weight_decay", 0.0), group.get("momentum", 0.0), group.get("dampening", 0.0)]
    values += list(group.get("betas", ())) + [group.get("eps", 0.0)]
    if any(isinstance(v, torch.Tensor) for v in values):
        raise PopulationError("optimizer hyperparameters given as tensors cannot be vectorised; use floats")
    if kind == "sgd":
        return _Optimizer(
            "sgd", lr=float(group["lr"]), weight_decay=float(group["weight_decay"]), maximize=bool(group["maximize"]),
            momentum=float(group["momentum"]), dampening=float(group["dampening"]), nesterov=bool(group["nesterov"]),
        )
    beta1, beta2 = group["betas"]
    return _Optimizer(
        "adam", lr=float(group["lr"]), weight_decay=float(group["weight_decay"]), maximize=bool(group["maximize"]),
        beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]), amsgrad=bool(group["amsgrad"]),
        decoupled=bool(group.get("decoupled_weight_decay", False)),
    )


def _loss_kind(problem: Problem, out_features: int) -> str:
    loss_fn, targets = problem.loss_fn, problem.targets
    if type(loss_fn) is nn.MSELoss and loss_fn.reduction in ("mean", "sum"):
        if targets.dtype == torch.float32 and targets.dim() == 2 and targets.shape[1] == out_features:
            return "mse_" + loss_fn.reduction
    if type(loss_fn) is nn.CrossEntropyLoss and loss_fn.reduction == "mean" and loss_fn.weight is None:
        if loss_fn.label_smoothing == 0.0 and targets.dtype == torch.int64 and targets.dim() == 1:
            if not bool((targets == loss_fn.ignore_index).any()):
                return "cross_entropy"
    return "generic"


def check_population(problem: Problem, amp_dtype: torch.dtype | None = torch.float16) -> None:
    """Raises :class:`PopulationError` (one line) if :func:`train_population` cannot train ``problem``.

    Checks the model (an ``nn.Sequential`` of ``nn.Linear`` and elementwise activations, no buffers),
    the inputs (2-D), the optimizer (SGD, Adam or AdamW, one group) and the autocast dtype, and runs the
    first batch through the model under autocast to check that every layer computes in ``amp_dtype``
    (the batched layers replay autocast's casts and nothing else).
    """
    _spec(problem, amp_dtype)


def _spec(problem: Problem, amp_dtype: torch.dtype | None) -> _Spec:
    if amp_dtype not in (torch.float16, torch.bfloat16):
        raise PopulationError(f"population mode trains under autocast float16 or bfloat16, not {amp_dtype}")
    layers = _layers(problem.model)
    if problem.inputs.dim() != 2 or not problem.inputs.is_floating_point():
        raise PopulationError(f"inputs of shape {tuple(problem.inputs.shape)}: population mode needs 2-D floating-point inputs")
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
                raise PopulationError(f"layer {position} ({type(module).__name__}) computes in {h.dtype} under autocast, not {amp_dtype}")
    last = problem.model[[i for i, layer in enumerate(layers) if layer.kind == "linear"][-1]]
    return _Spec(layers, _loss_kind(problem, last.out_features), optimizer)


# --------------------------------------------------------------------------------------------------
# The batched forward and backward.


def _activation(layer: _Layer, h: torch.Tensor) -> torch.Tensor:
    if layer.kind == "relu":
        return torch.relu(h)
    if layer.kind == "tanh":
        return torch.tanh(h)
    if layer.kind == "sigmoid":
        return torch.sigmoid(h)
    if layer.kind == "gelu":
        return nn.functional.gelu(h, approximate=layer.approximate)
    if layer.kind == "silu":
        return nn.functional.silu(h)
    if layer.kind == "leaky_relu":
        return nn.functional.leaky_relu(h, layer.negative_slope)
    return h


def _activation_backward(layer: _Layer, grad: torch.Tensor, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The op autograd's node for the activation calls (``h`` its input, ``y`` its output)."""
    aten = torch.ops.aten
    if layer.kind == "relu":
        return aten.threshold_backward(grad, y, 0)
    if layer.kind == "tanh":
        return aten.tanh_backward(grad, y)
    if layer.kind == "sigmoid":
        return aten.sigmoid_backward(grad, y)
    if layer.kind == "gelu":
        return aten.gelu_backward(grad, h, approximate=layer.approximate)
    if layer.kind == "silu":
        return aten.silu_backward(grad, h)
    if layer.kind == "leaky_relu":
        return aten.leaky_relu_backward(grad, h, layer.negative_slope, False)
    return grad


def _forward(layers: Sequence[_Layer], params: Sequence[torch.Tensor], x: torch.Tensor, k: int, dtype: torch.dtype
             ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor]]:
    """Runs the K members on the shared input ``x``; returns the outputs ``[K, B, out]`` in ``dtype``.

    Also returns what the backward needs: per layer its (input, output), and the ``dtype`` copies
    of the weights (autocast casts each fp32 weight once per forward).
    """
    low = [p.to(dtype) for p in params]
    h = x.to(dtype).expand(k, *x.shape)  # Autocast casts the input; every member sees the same batch.
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in layers:
        if layer.kind == "linear":
            weight_t = low[layer.weight].transpose(1, 2)
            if layer.bias >= 0:
                out = torch.baddbmm(low[layer.bias].unsqueeze(1), h, weight_t)
            else:
                out = torch.bmm(h, weight_t)
        else:
            out = _activation(layer, h)
        saved.append((h, out))
        h = out
    return h, saved, low


def _backward(layers: Sequence[_Layer], saved: Sequence[tuple[torch.Tensor, torch.Tensor]], low: Sequence[torch.Tensor],
              grad: torch.Tensor, n_params: int) -> list[torch.Tensor]:
    """Backpropagates ``grad`` (d scaled loss / d outputs, in the autocast dtype); fp32 gradients per parameter."""
    grads: list[torch.Tensor | None] = [None] * n_params
    first_linear = next(i for i, layer in enumerate(layers) if layer.kind == "linear")
    for i in range(len(layers) - 1, first_linear - 1, -1):
        layer = layers[i]
        h, y = saved[i]
        if layer.kind == "linear":
            grads[layer.weight] = torch.bmm(grad.transpose(1, 2), h).float()  # autocast's cast back to fp32
            if layer.bias >= 0:
                grads[layer.bias] = grad.sum(1).float()
            if i > first_linear:
                grad = torch.bmm(grad, low[layer.weight])
        else:
            grad = _activation_backward(layer, grad, h, y)
    return [g for g in grads if g is not None]


def _loss_and_grad(kind: str, problem: Problem, out: torch.Tensor, y: torch.Tensor, scale: torch.Tensor,
                   divisor: int, amp_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-member losses ``[K]`` (fp32, divided by ``divisor``) and d(scaled loss)/d(outputs) in ``amp_dtype``.

    The trainer backpropagates ``(loss / divisor) * scale``: the loss's own backward receives
    ``scale`` (the backward of the product), divided by ``divisor`` in fp32 when there is one.
    """
    k = out.shape[0]
    seed_grad = scale / divisor if divisor > 1 else scale
    if kind in ("mse_mean", "mse_sum"):
        out32 = out.float()  # autocast runs mse_loss in fp32
        diff = out32 - y
        squared = diff * diff
        loss = squared.mean((1, 2)) if kind == "mse_mean" else squared.sum((1, 2))
        norm = 2.0 / y.numel() if kind == "mse_mean" else 2.0
        # mse_loss_backward: float(norm) * (input - target) * grad, in that order.
        grad32 = torch.tensor(norm, dtype=torch.float32, device=out.device) * diff * seed_grad.view(k, 1, 1)
        return (loss / divisor if divisor > 1 else loss), grad32.to(amp_dtype)
    if kind == "cross_entropy":
        out32 = out.float()
        logp = torch.log_softmax(out32, dim=-1)
        index = y.view(1, -1, 1).expand(k, -1, 1)
        loss = -logp.gather(2, index).squeeze(2).mean(1)
        # nll_loss_backward (mean, no weights): -(grad / total_weight) at each target; total_weight = B.
        total = torch.tensor(float(y.shape[0]), dtype=torch.float32, device=out.device)
        nll = torch.zeros_like(logp).scatter_(2, index, (-(seed_grad / total)).view(k, 1, 1).expand(k, y.shape[0], 1))
        grad32 = torch._log_softmax_backward_data(nll, logp, -1, torch.float32)
        return (loss / divisor if divisor > 1 else loss), grad32.to(amp_dtype)
    # Any other loss: the task's own function, once per member, under autocast like the trainer calls it.
    losses, grads = [], []
    device_type = out.device.type
    for member in range(k):
        leaf = out[member].detach().requires_grad_(True)
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = problem.loss_fn(leaf, y)
            if divisor > 1:
                loss = loss / divisor
        (loss * scale[member]).backward()
        losses.append(loss.detach())  # in its own dtype: the trainer sums micro-batch losses in it
        grads.append(leaf.grad)
    return torch.stack(losses), torch.stack(grads)


# --------------------------------------------------------------------------------------------------
# Optimizer and scaler updates, masked per member.


def _where(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def _bias_tables(opt: _Optimizer, steps: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam's ``-lr / (1 - beta1**n)`` and ``(1 - beta2**n) ** 0.5`` for n = 0..steps, as float32.

    Computed with Python floats, as single-tensor Adam computes them from ``step.item()``; the
    float32 rounding is the one ``addcdiv``'s ``value`` and the division by a Python scalar apply.
    Entry 0 is never used by a taken step.
    """
    neg_step_size = [0.0] + [-(opt.lr / (1 - opt.beta1**n)) for n in range(1, steps + 1)]
    bc2_sqrt = [1.0] + [(1 - opt.beta2**n) ** 0.5 for n in range(1, steps + 1)]
    return (torch.tensor(neg_step_size, dtype=torch.float32, device=device),
            torch.tensor(bc2_sqrt, dtype=torch.float32, device=device))


class _State:
    """Stacked weights and optimizer state of the K members."""

    def __init__(self, problem: Problem, k: int, opt: _Optimizer, steps: int) -> None:
        self.opt = opt
        self.params = [p.detach().unsqueeze(0).repeat(k, *([1] * p.dim())).contiguous() for p in problem.model.parameters()]
        device = self.params[0].device
        self.momentum = [torch.zeros_like(p) for p in self.params] if opt.kind == "sgd" and opt.momentum != 0 else []
        self.has_momentum = torch.zeros(k, dtype=torch.bool, device=device)
        self.exp_avg = [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" else []
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" else []
        self.max_exp_avg_sq = [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" and opt.amsgrad else []
        self.adam_steps = torch.zeros(k, dtype=torch.int64, device=device)
        if opt.kind == "adam":
            self.neg_step_size, self.bc2_sqrt = _bias_tables(opt, steps, device)

    def step(self, grads: Sequence[torch.Tensor], taken: torch.Tensor) -> None:
        """One optimizer step for the members where ``taken`` is True; the others stay bit for bit."""
        if self.opt.kind == "sgd":
            self._sgd(grads, taken)
        else:
            self._adam(grads, taken)

    def _sgd(self, grads: Sequence[torch.Tensor], taken: torch.Tensor) -> None:
        opt = self.opt
        for i, (param, grad) in enumerate(zip(self.params, grads)):
            if opt.maximize:
                grad = -grad
            if opt.weight_decay != 0:
                grad = grad.add(param, alpha=opt.weight_decay)
            if opt.momentum != 0:
                buf = self.momentum[i]
                # The first taken step clones the gradient into the buffer, later ones decay it.
                updated = _where(self.has_momentum, buf.mul(opt.momentum).add_(grad, alpha=1 - opt.dampening), grad)
                self.momentum[i] = _where(taken, updated, buf)
                grad = grad.add(updated, alpha=opt.momentum) if opt.nesterov else updated
            self.params[i] = _where(taken, param.add(grad, alpha=-opt.lr), param)
        if opt.momentum != 0:
            self.has_momentum = self.has_momentum | taken

    def _adam(self, grads: Sequence[torch.Tensor], taken: torch.Tensor) -> None:
        opt = self.opt
        count = self.adam_steps + 1
        neg_step_size = self.neg_step_size[count]  # per member: its own number of taken steps
        bc2_sqrt = self.bc2_sqrt[count]
        for i, (param, grad) in enumerate(zip(self.params, grads)):
            shape = (-1,) + (1,) * (param.dim() - 1)
            if opt.maximize:
                grad = -grad
            start = param
            if opt.weight_decay != 0:
                if opt.decoupled:
                    start = param.mul(1 - opt.lr * opt.weight_decay)
                else:
                    grad = grad.add(param, alpha=opt.weight_decay)
            exp_avg = self.exp_avg[i].lerp(grad, 1 - opt.beta1)
            exp_avg_sq = self.exp_avg_sq[i].mul(opt.beta2).addcmul_(grad, grad, value=1 - opt.beta2)
            second = exp_avg_sq
            if opt.amsgrad:
                second = torch.maximum(self.max_exp_avg_sq[i], exp_avg_sq)
                self.max_exp_avg_sq[i] = _where(taken, second, self.max_exp_avg_sq[i])
            denom = (second.sqrt() / bc2_sqrt.view(shape)).add_(opt.eps)
            # addcdiv(param, m, denom, value=v) computes param + v * m / denom, left to right.
            new = start + neg_step_size.view(shape) * exp_avg / denom
            self.params[i] = _where(taken, new, param)
            self.exp_avg[i] = _where(taken, exp_avg, self.exp_avg[i])
            self.exp_avg_sq[i] = _where(taken, exp_avg_sq, self.exp_avg_sq[i])
        self.adam_steps = torch.where(taken, count, self.adam_steps)


def _update_scale(scale: torch.Tensor, tracker: torch.Tensor, found_inf: torch.Tensor, growth: torch.Tensor,
                  backoff: torch.Tensor, interval: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch._amp_update_scale_`` for K scales at once (float32 scales, float64 factors, int growth trackers)."""
    backed_off = (scale.double() * backoff).float()
    grown = (scale.double() * growth).float()
    grown = torch.where(torch.isfinite(grown), grown, scale)  # never grow past float32's range to inf
    successful = tracker + 1
    grow_now = successful == interval
    new_scale = torch.where(found_inf, backed_off, torch.where(grow_now, grown, scale))
    new_tracker = torch.where(found_inf | grow_now, torch.zeros_like(tracker), successful)
    return new_scale, new_tracker


def _clip(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``clip_grad_norm_`` per member: the 2-norm of each member's gradients, coefficient min(max_norm / (norm + 1e-6), 1)."""
    k = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), 2, dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, 2, dim=1)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return [g * coefficient.view(-1, *([1] * (g.dim() - 1))) for g in grads]


# --------------------------------------------------------------------------------------------------
# The loop.


def train_population(
    problem: Problem,
    configs: Sequence[ScalerConfig],
    *,
    epochs: int,
    steps: int | None = None,
    amp_dtype: torch.dtype = torch.float16,
    deadline: float | None = None,
    checkpoints: tuple[int, ...] = (),
    should_stop: Callable[[int, int, float], bool] | None = None,
) -> list[TrainResult]:
    """Trains one fresh copy of ``problem.model`` per setting in ``configs``, all at once.

    Each member sees the batches :func:`search.training._trainer.batch_plan` gives every trial, with its own
    loss scale, growth tracker and skip decisions (see the module docstring). One host read at the
    end, plus one per checkpoint when ``should_stop`` is given.

    Args:
        problem: The problem, already on the target device (see :meth:`Problem.to`).
        configs: One GradScaler setting per member (K >= 1).
        epochs: Passes over the data (full-batch tasks: optimizer steps).
        steps: Optimizer steps instead of ``epochs``, or None.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16`` for autocast.
        deadline: ``time.perf_counter()`` value after which :class:`~search.training._trainer.TrialTimeout`
            is raised for the whole population.
        checkpoints: Steps after which ``should_stop`` is asked, for every member still training.
        should_stop: ``should_stop(member, step, loss)``; True stops that member there (its weights
            and scale freeze, its curves end; ``stopped_early`` in its result), as the trainer's
            ``should_stop`` ends one trial.

    Returns:
        One :class:`~search.training._trainer.TrainResult` per member, in the order of ``configs``; each
        ``train_seconds`` is the wall time of the whole population's run (not the references
        computed once per problem: the fp32 zero fraction and the initial weights' evaluation).

    Raises:
        PopulationError: The model, loss, optimizer or dtype cannot be vectorised.
    """
    if not configs:
        raise ValueError("train_population needs at least one ScalerConfig")
    spec = _spec(problem, amp_dtype)
    # Computed once per problem and shared by every trial (the first population pays): outside its time.
    mode = evaluation_mode(problem)
    fp32_zeros = fp32_zero_fraction(problem, epochs, steps)
    initial = initial_evaluation(problem) if mode != LAST_STEP else None
    start = time.perf_counter()
    k = len(configs)
    inputs, targets = problem.inputs, problem.targets
    device = inputs.device
    plan = batch_plan(problem, epochs, steps)
    state = _State(problem, k, spec.optimizer, len(plan))
    n_params = len(state.params)

    # GradScaler's state per member: the float32 scale (torch.full rounds the float64 init_scale to
    # float32 the same way) and an int32 growth tracker; the factors stay float64 like the kernel's.
    scale = torch.tensor([c.init_scale for c in configs], dtype=torch.float32, device=device)
    tracker = torch.zeros(k, dtype=torch.int32, device=device)
    growth = torch.tensor([c.growth_factor for c in configs], dtype=torch.float64, device=device)
    backoff = torch.tensor([c.backoff_factor for c in configs], dtype=torch.float64, device=device)
    interval = torch.tensor([c.growth_interval for c in configs], dtype=torch.int32, device=device)
    active = torch.ones(k, dtype=torch.bool, device=device)
    stopped_at: list[int | None] = [None] * k  # the step count where should_stop ended a member
    taken = 0

    losses: list[torch.Tensor] = []
    scales: list[torch.Tensor] = []
    found_infs: list[torch.Tensor] = []
    zero_counts: list[torch.Tensor] = []
    grad_size = sum(p[0].numel() for p in state.params)

    for step, micro_batches in enumerate(plan):
        if deadline is not None and time.perf_counter() > deadline:
            raise TrialTimeout(f"trial timeout after {step} of {len(plan)} steps (population of {k})")
        divisor = len(micro_batches)  # Accumulated micro-batch losses are divided by their number.
        grads: list[torch.Tensor] | None = None
        step_loss: torch.Tensor | None = None
        for index in micro_batches:
            x, y = (inputs, targets) if index is None else (inputs[index], targets[index])
            out, saved, low = _forward(spec.layers, state.params, x, k, amp_dtype)
            loss, grad_out = _loss_and_grad(spec.loss, problem, out, y, scale, divisor, amp_dtype)
            micro_grads = _backward(spec.layers, saved, low, grad_out, n_params)
            grads = micro_grads if grads is None else [a + b for a, b in zip(grads, micro_grads)]
            step_loss = loss if step_loss is None else step_loss + loss
        assert grads is not None and step_loss is not None
        # The scaled gradients as backward produced them: zeros counted, infs found (per member).
        zero_counts.append(torch.stack([(g == 0).reshape(k, -1).sum(1) for g in grads]).sum(0))
        found_inf = torch.stack([(~torch.isfinite(g)).reshape(k, -1).any(1) for g in grads]).any(0)
        inv_scale = scale.double().reciprocal().float()
        grads = [g * inv_scale.view(-1, *([1] * (g.dim() - 1))) for g in grads]
        if problem.grad_clip is not None:
            grads = _clip(grads, problem.grad_clip)
        state.step(grads, ~found_inf & active)
        new_scale, new_tracker = _update_scale(scale, tracker, found_inf, growth, backoff, interval)
        scale = torch.where(active, new_scale, scale)
        tracker = torch.where(active, new_tracker, tracker)

        losses.append(step_loss)
        scales.append(scale)
        found_infs.append(found_inf)
        taken = step + 1
        if should_stop is not None and taken in checkpoints:
            current = step_loss.tolist()  # a host read, as the trainer's checkpoint makes one
            for member in range(k):
                if stopped_at[member] is None and should_stop(member, step, float(current[member])):
                    stopped_at[member] = taken
            active = torch.tensor([at is None for at in stopped_at], dtype=torch.bool, device=device)
            if all(at is not None for at in stopped_at):
                break

    # The one host read of the run (per member: rows of these tables).
    loss_table = torch.stack(losses, 1).tolist() if losses else [[] for _ in range(k)]
    scale_table = torch.stack(scales, 1).tolist() if scales else [[] for _ in range(k)]
    skip_table = torch.stack(found_infs, 1).tolist() if found_infs else [[] for _ in range(k)]
    zero_table = torch.stack(zero_counts, 1).tolist() if zero_counts else [[] for _ in range(k)]
    model = copy.deepcopy(problem.model)
    # Member by member through the same module code as search.training._trainer.train (the same numbers),
    # but read to the host once for all members: per member that was 2 + one per parameter syncs.
    on_device = []
    with torch.no_grad():
        for member in range(k):
            for target, stacked in zip(model.parameters(), state.params):
                target.copy_(stacked[member])
            # float64 holds every number below exactly, whatever the task's loss returns.
            final_fp32 = problem.loss_fn(model(inputs).float(), targets).double().reshape(1)
            finite = torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all().double().reshape(1)
            evaluated = evaluation_values(problem, model).double() if mode != LAST_STEP else final_fp32.new_empty(0)
            on_device.append(torch.cat([final_fp32, finite, evaluated]))
    read = [row.tolist() for row in torch.stack(on_device).cpu()] if k else []
    measured = []
    for member in range(k):
        n = taken if stopped_at[member] is None else stopped_at[member]
        loss_curve, scale_curve = loss_table[member][:n], scale_table[member][:n]
        skipped = [bool(s) for s in skip_table[member][:n]]
        counted = grad_size * sum(1 for s in skipped if not s)
        zeros = sum(z for z, s in zip(zero_table[member][:n], skipped) if not s)
        final_fp32, weights_finite = read[member][0], bool(read[member][1])
        if mode == LAST_STEP:
            first = loss_curve[0] if loss_curve else float("nan")
            last = loss_curve[-1] if loss_curve else float("nan")
            before, after = Evaluation(first, first), Evaluation(last, last)
        else:
            assert initial is not None
            before, after = initial, evaluation_of(read[member][2:])
        measured.append((loss_curve, scale_curve, skipped, zeros / counted if counted else 0.0, final_fp32,
                         weights_finite, before, after, n))
    seconds = time.perf_counter() - start
    results = []
    for member, (loss_curve, scale_curve, skipped, zero_fraction, final_fp32, weights_finite, before, after, n) in enumerate(measured):
        results.append(
            TrainResult(
                loss_curve=loss_curve,
                scale_curve=scale_curve,
                skipped=skipped,
                final_loss=loss_curve[-1] if loss_curve else float("nan"),
                final_loss_fp32=final_fp32,
                eval_loss=after.loss,
                initial_eval_loss=before.loss,
                eval_median=after.median_chunk_loss,
                initial_eval_median=before.median_chunk_loss,
                evaluation=mode,
                skipped_steps=sum(skipped),
                zero_grad_fraction=zero_fraction,
                fp32_zero_fraction=fp32_zeros,
                weights_finite=weights_finite,
                steps=n,
                train_seconds=seconds,
                stopped_early=stopped_at[member] is not None,
            )
        )
    return results

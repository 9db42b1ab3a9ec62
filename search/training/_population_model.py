"""K copies of one model as stacked tensors: the forward, the loss and the backward, written out by hand.

* **Weights** are stacked: every ``nn.Linear`` weight is one fp32 tensor ``[K, out, in]``, every bias
  ``[K, out]`` (the plan comes from :mod:`search.training._population_check`).
* **Forward and backward** use the kernels autograd would call for one member under ``torch.autocast``:
  the fp32 master weights are cast to the autocast dtype, each layer is ``baddbmm(bias, input, weightᵀ)``
  (the batched form of the ``addmm`` that ``F.linear`` calls), each activation's backward is its own
  ATen backward op (``threshold_backward``, ``tanh_backward``, ...), the weight gradient is
  ``bmm(gradᵀ, input)``, the bias gradient a sum over the batch, and the cast back to fp32 happens where
  autocast's cast does. ``torch.func.vmap`` is not used: under ``vmap`` autocast does not apply, and the
  layers silently run in fp32.
* **The loss** runs in fp32 on the fp32 copy of the outputs, as autocast runs it. ``nn.MSELoss``
  (``mean``/``sum``) and ``nn.CrossEntropyLoss`` are vectorised with the formulas of their ATen backward
  kernels (``mse_loss_backward``: ``2/N * (x - y) * g``; ``nll_loss_backward`` then
  ``_log_softmax_backward_data``). Any other ``loss_fn`` is called once per member under autocast, on a
  leaf holding that member's outputs (exact, K small calls per micro-batch). Member k's backward starts
  from its own loss scale ``s_k``, as ``scaler.scale(loss).backward()`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from search.tasks.base import Problem
from search.training._population_check import _Layer

__all__: list[str] = []


def _activation(layer: _Layer, h: torch.Tensor) -> torch.Tensor:
    """The activation's forward, the function its module calls."""
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


def _forward(
    layers: Sequence[_Layer], params: Sequence[torch.Tensor], x: torch.Tensor, k: int, dtype: torch.dtype
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


def _backward(
    layers: Sequence[_Layer],
    saved: Sequence[tuple[torch.Tensor, torch.Tensor]],
    low: Sequence[torch.Tensor],
    grad: torch.Tensor,
    n_params: int,
) -> list[torch.Tensor]:
    """Backpropagates ``grad`` (d scaled loss / d outputs, in the autocast dtype); fp32 gradients per
    parameter."""
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


def _loss_and_grad(
    kind: str,
    problem: Problem,
    out: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    divisor: int,
    amp_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-member losses ``[K]`` (fp32, divided by ``divisor``) and d(scaled loss)/d(outputs) in
    ``amp_dtype``.

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
        nll = torch.zeros_like(logp).scatter_(
            2, index, (-(seed_grad / total)).view(k, 1, 1).expand(k, y.shape[0], 1)
        )
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

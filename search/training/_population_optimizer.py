"""The K members' stacked weights and optimizer state, stepped only where GradScaler takes the step.

The optimizer is the one the task's ``make_optimizer`` returns, read into hyperparameters by
:mod:`search.training._population_check`: ``torch.optim.SGD`` (momentum, dampening, Nesterov, weight
decay, maximize) or ``torch.optim.Adam``/``AdamW`` (betas, eps, weight decay, decoupled or not,
AMSGrad, maximize), one parameter group. Its update is torch.optim's single-tensor update, op for op,
on the stacked tensors (``lerp_``, ``mul_().addcmul_()``, ``sqrt() / bias_correction2_sqrt + eps``,
``addcdiv``), and every result passes through ``torch.where(step_taken[k], new, old)``: a member whose
step GradScaler skips keeps its weights, momentum, moments and Adam step count bit for bit, like an
optimizer whose ``step()`` was never called. Adam's bias corrections depend on each member's own count
of taken steps; they are computed in Python floats for every count up front (as Adam computes them
from ``step.item()``) and gathered per member on the device, so the loop never reads the host for them.

``problem.grad_clip`` is :func:`_clip_per_member`: ``clip_grad_norm_`` on each member's gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from search.tasks.base import Problem
from search.training._population_check import _Optimizer

__all__: list[str] = []


def _where(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``new`` for the members where ``mask`` ``[K]`` is True, ``old`` for the others."""
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def _bias_tables(opt: _Optimizer, steps: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam's ``-lr / (1 - beta1**n)`` and ``(1 - beta2**n) ** 0.5`` for n = 0..steps, as float32.

    Computed with Python floats, as single-tensor Adam computes them from ``step.item()``; the
    float32 rounding is the one ``addcdiv``'s ``value`` and the division by a Python scalar apply.
    Entry 0 is never used by a taken step.
    """
    neg_step_size = [0.0] + [-(opt.lr / (1 - opt.beta1**n)) for n in range(1, steps + 1)]
    bc2_sqrt = [1.0] + [(1 - opt.beta2**n) ** 0.5 for n in range(1, steps + 1)]
    return (
        torch.tensor(neg_step_size, dtype=torch.float32, device=device),
        torch.tensor(bc2_sqrt, dtype=torch.float32, device=device),
    )


class _MemberOptimizer:
    """The K members' stacked weights (``params``, fp32 ``[K, ...]`` each) and their optimizer state."""

    def __init__(self, problem: Problem, k: int, opt: _Optimizer, steps: int) -> None:
        self.opt = opt
        self.params = [
            p.detach().unsqueeze(0).repeat(k, *([1] * p.dim())).contiguous()
            for p in problem.model.parameters()
        ]
        device = self.params[0].device
        self.momentum = (
            [torch.zeros_like(p) for p in self.params] if opt.kind == "sgd" and opt.momentum != 0 else []
        )
        self.has_momentum = torch.zeros(k, dtype=torch.bool, device=device)
        self.exp_avg = [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" else []
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" else []
        self.max_exp_avg_sq = (
            [torch.zeros_like(p) for p in self.params] if opt.kind == "adam" and opt.amsgrad else []
        )
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
        """``torch.optim.SGD``'s single-tensor step, member by member through ``_where``."""
        opt = self.opt
        for i, (param, grad) in enumerate(zip(self.params, grads)):
            if opt.maximize:
                grad = -grad
            if opt.weight_decay != 0:
                grad = grad.add(param, alpha=opt.weight_decay)
            if opt.momentum != 0:
                buf = self.momentum[i]
                # The first taken step clones the gradient into the buffer, later ones decay it.
                updated = _where(
                    self.has_momentum, buf.mul(opt.momentum).add_(grad, alpha=1 - opt.dampening), grad
                )
                self.momentum[i] = _where(taken, updated, buf)
                grad = grad.add(updated, alpha=opt.momentum) if opt.nesterov else updated
            self.params[i] = _where(taken, param.add(grad, alpha=-opt.lr), param)
        if opt.momentum != 0:
            self.has_momentum = self.has_momentum | taken

    def _adam(self, grads: Sequence[torch.Tensor], taken: torch.Tensor) -> None:
        """``torch.optim.Adam``'s (and AdamW's) single-tensor step, with each member's own step count."""
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


def _clip_per_member(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``clip_grad_norm_`` per member: the 2-norm of each member's gradients, coefficient min(max_norm / (norm
    + 1e-6), 1)."""
    k = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), 2, dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, 2, dim=1)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return [g * coefficient.view(-1, *([1] * (g.dim() - 1))) for g in grads]

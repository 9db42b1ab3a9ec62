"""``torch.amp.GradScaler`` for K members at once: one float32 loss scale and growth tracker each.

Member k's loss is multiplied by its own float32 scale ``s_k``, so its backward carries ``s_k``
(:mod:`search.training._population_model`). Then, as GradScaler does for one scale:

* ``found_inf[k]`` is set when any of member k's (accumulated, still scaled) fp32 gradients is inf or
  NaN, as ``_amp_foreach_non_finite_check_and_unscale_`` sets it, and the gradients are multiplied by
  ``inv_scale_k = float32(1 / float64(s_k))`` (GradScaler computes the reciprocal in fp64);
* the update follows ``_amp_update_scale_``: on ``found_inf`` ``s_k = float32(float64(s_k) * backoff_k)``
  and the growth tracker drops to 0; otherwise the tracker counts one more good step and, when it
  reaches ``growth_interval_k``, ``s_k = float32(float64(s_k) * growth_k)`` unless that is inf in float32
  (then the scale stays) and the tracker drops to 0. The product is taken in float64 and rounded once
  to float32, as the ATen kernel's ``float * double`` does; it is not the same as multiplying in float32.

A member that ``should_stop`` ended keeps its scale and tracker as they are (``active`` is False).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from search.scalers import ScalerConfig

__all__: list[str] = []


class _MemberScalers:
    """The GradScaler state of K members: what ``scale``, ``unscale_`` and ``update`` do, per member."""

    def __init__(self, configs: Sequence[ScalerConfig], device: torch.device) -> None:
        # The float32 scale (torch.tensor rounds the float64 init_scale to float32 as GradScaler's
        # torch.full does) and an int32 growth tracker; the factors stay float64 like the kernel's.
        self.scale = torch.tensor([c.init_scale for c in configs], dtype=torch.float32, device=device)
        self.growth_tracker = torch.zeros(len(configs), dtype=torch.int32, device=device)
        self.growth_factor = torch.tensor(
            [c.growth_factor for c in configs], dtype=torch.float64, device=device
        )
        self.backoff_factor = torch.tensor(
            [c.backoff_factor for c in configs], dtype=torch.float64, device=device
        )
        self.growth_interval = torch.tensor(
            [c.growth_interval for c in configs], dtype=torch.int32, device=device
        )

    def unscale(self, grads: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The gradients divided by each member's scale, and ``found_inf`` ``[K]`` of the scaled ones."""
        k = self.scale.shape[0]
        found_inf = torch.stack([(~torch.isfinite(g)).reshape(k, -1).any(1) for g in grads]).any(0)
        inv_scale = self.scale.double().reciprocal().float()
        return [g * inv_scale.view(-1, *([1] * (g.dim() - 1))) for g in grads], found_inf

    def update(self, found_inf: torch.Tensor, active: torch.Tensor) -> None:
        """Backs off, grows or keeps each ``active`` member's scale after a step."""
        new_scale, new_tracker = _update_scale(
            self.scale,
            self.growth_tracker,
            found_inf,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval,
        )
        self.scale = torch.where(active, new_scale, self.scale)
        self.growth_tracker = torch.where(active, new_tracker, self.growth_tracker)


def _update_scale(
    scale: torch.Tensor,
    tracker: torch.Tensor,
    found_inf: torch.Tensor,
    growth: torch.Tensor,
    backoff: torch.Tensor,
    interval: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch._amp_update_scale_`` for K scales at once (float32 scales, float64 factors, int growth
    trackers)."""
    backed_off = (scale.double() * backoff).float()
    grown = (scale.double() * growth).float()
    grown = torch.where(torch.isfinite(grown), grown, scale)  # never grow past float32's range to inf
    successful = tracker + 1
    grow_now = successful == interval
    new_scale = torch.where(found_inf, backed_off, torch.where(grow_now, grown, scale))
    new_tracker = torch.where(found_inf | grow_now, torch.zeros_like(tracker), successful)
    return new_scale, new_tracker

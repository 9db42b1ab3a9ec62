"""Writes late-mlp's checkpoint at step 320: a plain PyTorch AMP loop at PyTorch's default GradScaler.

The run a user would have: ``python examples/late_checkpoint.py late-320.pt`` trains the built-in task
``late-mlp`` 320 steps (autocast float16, ``torch.amp.GradScaler("cpu")``, each step seeded as the service
seeds it) and saves a ``torch.save`` dict with the keys ``search.optimize --checkpoint`` reads: ``model``,
``optimizer``, ``scaler`` and ``step`` (docs/tasks.md). Then::

    python -m search.diagnose --task late-mlp --checkpoint late-320.pt --json d.json
    python -m search.optimize --task late-mlp --checkpoint late-320.pt --from-diagnosis d.json --trials 40
"""

from __future__ import annotations

import copy
import sys

import torch

from search.tasks.late_mlp import LATE_STEP, build


def write_late_checkpoint(path: str, seed: int = 42) -> str:
    """Trains late-mlp from its initial weights to step 320 and saves the run there; returns ``path``."""
    problem = build(seed)
    model = copy.deepcopy(problem.model)
    optimizer = problem.make_optimizer(model.parameters())
    scaler = torch.amp.GradScaler("cpu")
    for step in range(LATE_STEP):
        x, y = problem.train_batches[step]
        torch.manual_seed((problem.seed * 1_000_003 + step) % 2**63)  # as every trial seeds a step
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = problem.loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}
    torch.save(state | {"step": LATE_STEP}, path)
    return path


if __name__ == "__main__":
    print(f"wrote {write_late_checkpoint(sys.argv[1] if len(sys.argv) > 1 else 'late-320.pt')}")

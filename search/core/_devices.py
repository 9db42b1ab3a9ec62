"""Devices: resolving ``--device`` and the labels stored with trials and workers."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from search.core._errors import UsageError


def resolve_device(name: str) -> torch.device:
    """Maps auto/cpu/cuda/cuda:N to a device that exists here."""
    import torch  # Here, not at the top: the commands that never train must not pay for it.

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return device


def device_label(device: torch.device) -> str:
    """``cpu`` or ``cuda:N (GPU name)``, stored with every trial."""
    import torch

    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def process_token() -> str:
    """Something unique to this process anywhere: host name and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"

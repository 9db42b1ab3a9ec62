"""The real frameworks in the tests: imported or failed naming the set-up command, and accelerate on the CPU.

accelerate builds no GradScaler on a CPU device (``Accelerator.__init__``: ``self.device.type != "cpu"``), so
a test that needs the scaler a GPU run would have (the paste lines' tests, a Trainer that saves ``scaler.pt``)
builds the Accelerator with ``Accelerator.device`` reading ``cuda``: ``get_grad_scaler`` then builds the
``torch.amp.GradScaler`` it would on a GPU, on the CPU backend it finds.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from unittest import mock

import pytest
import torch


def need(module: str) -> ModuleType:
    """``module`` imported, or the test fails naming the set-up command (the suite installs nothing)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(f"{module} is not installed ({error}); set-up step: pip install -e '.[dev]'")


@pytest.fixture
def fresh_accelerate() -> Iterator[None]:
    """accelerate keeps its state in process-wide singletons: each test starts and ends with none."""
    need("accelerate")
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


@contextlib.contextmanager
def as_on_a_gpu() -> Iterator[None]:
    """accelerate's own scaler construction, which it skips on a CPU device (for construction only)."""
    from accelerate import Accelerator

    with mock.patch.object(
        Accelerator, "device", new_callable=mock.PropertyMock, return_value=torch.device("cuda")
    ):
        yield

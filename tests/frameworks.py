"""The real frameworks in the tests: imported or failed naming the set-up command, accelerate on the CPU,
DeepSpeed's loss scaler without a process group, and Megatron-LM's scaler transcribed (it needs CUDA).

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


def deepspeed_scaler(power: int, window: int, hysteresis: int, consecutive: bool, minimum: float):  # noqa: ANN201
    """DeepSpeed's own ``DynamicLossScaler`` as ZeRO builds it from an fp16 block (``initial_scale_power``,
    ``loss_scale_window``, ``hysteresis``, ``consecutive_hysteresis``, ``min_loss_scale``, in
    :class:`~search.scalers.DeepSpeedScale`'s order). It asks its process group for the rank only to decide
    whether to log: there is none here, so rank 0 it is, for the test process."""
    module = need("deepspeed.runtime.fp16.loss_scaler")
    module.dist.get_rank = lambda *args, **kwargs: 0
    return module.DynamicLossScaler(
        init_scale=2.0**power,
        scale_window=window,
        min_scale=minimum,
        delayed_shift=hysteresis,
        consecutive_hysteresis=bool(consecutive),
    )


class PlainDynamicGradScaler:
    """Megatron-LM's ``DynamicGradScaler`` (megatron/core/optimizer/grad_scaler.py, commit 00caa53) on the
    CPU: its float32 tensors, ``update``, ``state_dict`` and ``load_state_dict`` as written there."""

    def __init__(  # noqa: ANN001
        self, initial_scale, min_scale, growth_factor, backoff_factor, growth_interval, hysteresis
    ):
        self._scale = torch.tensor([initial_scale], dtype=torch.float)
        self.min_scale = torch.tensor([min_scale], dtype=torch.float)
        self.growth_factor = torch.tensor([growth_factor], dtype=torch.float)
        self.backoff_factor = torch.tensor([backoff_factor], dtype=torch.float)
        self.growth_interval = growth_interval
        self.hysteresis = hysteresis
        self._growth_tracker = 0
        self._hysteresis_tracker = self.hysteresis

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker -= 1
            if self._hysteresis_tracker <= 0:
                self._scale = torch.max(self._scale * self.backoff_factor, self.min_scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_tracker = self.hysteresis
                self._scale = self._scale * self.growth_factor

    def state_dict(self) -> dict:
        return {
            "scale": self._scale,
            "growth_tracker": self._growth_tracker,
            "hysteresis_tracker": self._hysteresis_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self._scale = state_dict["scale"]
        self._growth_tracker = state_dict["growth_tracker"]
        self._hysteresis_tracker = state_dict["hysteresis_tracker"]

"""The lines a user pastes into their training code to train with given GradScaler settings.

A study ends with four numbers; a user trains with plain PyTorch, FSDP, Accelerate, Lightning or the
Hugging Face Trainer, and each sets its scaler in its own place. :func:`paste_lines` writes, per
framework, a short snippet (imports first, then the line or lines) that makes the scaler the framework
really uses carry exactly these settings. Each rule below was read from the installed library's source
and is checked against the real library by ``tests/results/test_paste.py``; ``docs/frameworks.md``
names the files and versions.

Only the settings that differ from PyTorch's defaults are written, always as keywords: positional
orders differ between classes (``ShardedGradScaler`` takes ``backoff_factor`` before
``growth_factor``), and a keyword cannot land in the wrong place. Values are written the way
:meth:`ScalerConfig.as_code` writes them, so a pasted line re-runs the measured setting.

This module only builds strings: it imports neither torch nor any framework (``tests/test_layering.py``).

Example:

    .. code::

        from search.scalers import ScalerConfig
        from search.results import paste_lines

        print(paste_lines(ScalerConfig(1234.5, 3.7, 0.31, 77))["lightning"])
"""

from __future__ import annotations

# From the rules, not search.core: the commands' --paste choices read FRAMEWORKS before anything imports
# Optuna.
from search.scalers import GRADSCALER, PARAM_NAMES, ScalerConfig

__all__ = ["FRAMEWORKS", "paste_lines", "scaler_line"]

# The frameworks paste_lines writes for, in its order, with the names people know them by.
FRAMEWORKS = {
    "torch": "plain PyTorch (torch.amp.GradScaler)",
    "fsdp": "FSDP (ShardedGradScaler)",
    "accelerate": "Hugging Face Accelerate",
    "lightning": "Lightning",
    "hf_trainer": "the Hugging Face Trainer",
}

# accelerate's Accelerator.__init__ (accelerator.py) builds a scaler only when
# `distributed_type not in (DEEPSPEED, MEGATRON_LM)`: those backends scale the loss themselves.
_IGNORED_BACKENDS = "# Ignored under DeepSpeed and Megatron-LM: set loss scaling in their own config."
# ... and only when `self.device.type != "cpu"`: fp16 on CPU runs without any GradScaler.
_NO_SCALER_ON_CPU = "# On CPU accelerate uses no GradScaler at all: these settings take effect on GPUs."


def paste_lines(config: ScalerConfig, device_type: str = "cuda") -> dict[str, str]:
    """Per framework, the Python a user pastes to train with ``config``'s GradScaler settings.

    Args:
        config: The four settings.
        device_type: The device the scaler runs on (``"cuda"``, ``"xpu"``, ``"cpu"``...), for the
            frameworks whose scaler names one; Accelerate and the Trainer pick their device themselves.

    Returns:
        ``torch``, ``fsdp``, ``accelerate``, ``lightning`` and ``hf_trainer``, in this order, each a
        snippet: the needed imports on the first lines, then the line(s). When all four settings are
        PyTorch's defaults each snippet is the framework's plain fp16 form.
    """
    keywords = _keywords(config)
    return {
        "torch": _torch(keywords, device_type),
        "fsdp": _fsdp(keywords, device_type),
        "accelerate": _accelerate(keywords, device_type),
        "lightning": _lightning(keywords, device_type),
        "hf_trainer": _hf_trainer(keywords, device_type),
    }


def scaler_line(config: ScalerConfig, device_type: str = "cuda") -> str:
    """The one ``torch.amp.GradScaler(...)`` expression of ``config``, naming only what differs from the
    defaults."""
    return _grad_scaler(_keywords(config), device_type)


def _keywords(config: ScalerConfig) -> list[str]:
    """``name=value`` for each setting that differs from PyTorch's default, in GradScaler's order."""
    return [
        f"{name}={config.written(name)}"
        for name in PARAM_NAMES
        if getattr(config, name) != GRADSCALER.default[name]
    ]


def _snippet(imports: list[str], *lines: str) -> str:
    return "\n".join([*imports, "", *lines])


def _grad_scaler(keywords: list[str], device_type: str) -> str:
    # The device stays first and positional, as in ScalerConfig.as_code: it is GradScaler's first
    # parameter in every torch that has torch.amp.GradScaler (2.3 on).
    arguments = ", ".join([f'"{device_type}"', *keywords])
    return f"torch.amp.GradScaler({arguments})"


def _torch(keywords: list[str], device_type: str) -> str:
    return _snippet(["import torch"], f"scaler = {_grad_scaler(keywords, device_type)}")


def _fsdp(keywords: list[str], device_type: str) -> str:
    # ShardedGradScaler(device, init_scale, backoff_factor, growth_factor, ...): a positional
    # growth_factor would land on backoff_factor; its device parameter is named `device`.
    arguments = ", ".join([f'device="{device_type}"', *keywords])
    return _snippet(
        ["from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler"],
        f"scaler = ShardedGradScaler({arguments})",
    )


def _accelerate(keywords: list[str], device_type: str) -> str:
    if not keywords:
        return _snippet(
            ["from accelerate import Accelerator"], 'accelerator = Accelerator(mixed_precision="fp16")'
        )
    notes = [_IGNORED_BACKENDS] + ([_NO_SCALER_ON_CPU] if device_type == "cpu" else [])
    handler = f"GradScalerKwargs({', '.join(keywords)})"
    return _snippet(
        ["from accelerate import Accelerator", "from accelerate.utils import GradScalerKwargs"],
        *notes,
        f'accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[{handler}])',
    )


def _lightning(keywords: list[str], device_type: str) -> str:
    # The plugin form even for the defaults: Trainer(accelerator="cpu", precision="16-mixed") turns
    # into bf16-mixed, which has no scaler, while the plugin keeps fp16 on every device.
    imports = [
        "from lightning.pytorch import Trainer",
        "from lightning.pytorch.plugins import MixedPrecision",
    ]
    arguments = f'precision="16-mixed", device="{device_type}"'
    if keywords:
        imports = ["import torch", *imports]
        arguments += f", scaler={_grad_scaler(keywords, device_type)}"
    return _snippet(
        imports,
        "# No precision= argument: Lightning refuses it next to a precision plugin.",
        f"trainer = Trainer(plugins=[MixedPrecision({arguments})])",
    )


def _hf_trainer(keywords: list[str], device_type: str) -> str:
    if not keywords:
        return _snippet(["from transformers import TrainingArguments"], "args = TrainingArguments(fp16=True)")
    # The Trainer builds its Accelerator in create_accelerator_and_postprocess from the arguments
    # _build_accelerator_args returns (also when a hyperparameter search re-creates it); adding the
    # handler there lets accelerate choose the scaler class (ShardedGradScaler under FSDP) as usual.
    notes = [_IGNORED_BACKENDS] + ([_NO_SCALER_ON_CPU] if device_type == "cpu" else [])
    return _snippet(
        ["from accelerate.utils import GradScalerKwargs", "from transformers import Trainer"],
        "# transformers>=5.25,<6; use ScalerTrainer where you used Trainer, with"
        " TrainingArguments(fp16=True).",
        *notes,
        "class ScalerTrainer(Trainer):",
        "    def _build_accelerator_args(self, **kwargs):",
        "        args = super()._build_accelerator_args(**kwargs)",
        f"        args[\"kwargs_handlers\"].append(GradScalerKwargs({', '.join(keywords)}))",
        "        return args",
    )

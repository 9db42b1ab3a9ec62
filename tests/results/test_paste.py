"""paste_lines against the real frameworks: each snippet is executed and the scaler it yields is read back.

Every framework's snippet runs against the installed library on the CPU, and the test reads the four
settings from the scaler object the framework really ends up using (not from the snippet's text), on
settings that are neither powers of two nor defaults, on a change of init_scale alone, and on the
defaults. accelerate's and the Trainer's scalers are built as on a GPU (:mod:`frameworks`). A missing
framework fails naming the install command.
"""

from __future__ import annotations

import dataclasses
import inspect
from unittest import mock

import pytest
import torch

from search.results import paste_lines
from search.scalers import PARAM_NAMES, ScalerConfig

from frameworks import as_on_a_gpu, need

ODD = ScalerConfig(1234.5, 3.7, 0.31, 77)  # No power of two, no default.
INIT_ONLY = ScalerConfig(1234.5, 2.0, 0.5, 2000)
DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)
CASES = {"odd": ODD, "init_only": INIT_ONLY, "default": DEFAULT}
NAMED = {"odd": set(PARAM_NAMES), "init_only": {"init_scale"}, "default": set()}


def _run(snippet: str, **namespace: object) -> dict[str, object]:
    exec(compile(snippet, "<pasted>", "exec"), namespace)
    return namespace


def _settings(scaler: torch.amp.GradScaler) -> tuple[float, float, float, int]:
    """The four settings as the scaler object holds them (init_scale: the one it started from)."""
    return (
        scaler._init_scale,
        scaler.get_growth_factor(),
        scaler.get_backoff_factor(),
        scaler.get_growth_interval(),
    )


def _expected(config: ScalerConfig) -> tuple[float, float, float, int]:
    return (config.init_scale, config.growth_factor, config.backoff_factor, config.growth_interval)


def test_keys_in_order_and_only_the_differing_settings_named():
    for case, config in CASES.items():
        lines = paste_lines(config, "cpu")
        assert list(lines) == ["torch", "fsdp", "accelerate", "lightning", "hf_trainer"]
        for framework, snippet in lines.items():
            named = {name for name in PARAM_NAMES if f"{name}=" in snippet}
            assert named == NAMED[case], (case, framework, snippet)
            assert snippet.splitlines()[0].startswith(("import ", "from ")), snippet


def test_the_torch_line_is_as_code_when_all_four_differ():
    assert paste_lines(ODD, "xpu")["torch"].splitlines()[-1] == f"scaler = {ODD.as_code('xpu')}"
    assert paste_lines(DEFAULT)["torch"].splitlines()[-1] == 'scaler = torch.amp.GradScaler("cuda")'


@pytest.mark.parametrize("case", CASES)
def test_torch(case):
    scaler = _run(paste_lines(CASES[case], "cpu")["torch"])["scaler"]
    assert type(scaler) is torch.amp.GradScaler and scaler._device == "cpu"
    assert _settings(scaler) == _expected(CASES[case])


@pytest.mark.parametrize("case", CASES)
def test_fsdp(case):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    # Positional order init_scale, backoff_factor, growth_factor: why the snippet uses keywords only.
    assert list(inspect.signature(ShardedGradScaler).parameters)[:4] == [
        "device",
        "init_scale",
        "backoff_factor",
        "growth_factor",
    ]
    scaler = _run(paste_lines(CASES[case], "cpu")["fsdp"])["scaler"]
    assert isinstance(scaler, ShardedGradScaler) and scaler._device == "cpu"
    assert _settings(scaler) == _expected(CASES[case])


@pytest.mark.parametrize("case", CASES)
def test_accelerate(case, fresh_accelerate):
    snippet = paste_lines(CASES[case], "cuda")["accelerate"]
    with as_on_a_gpu():
        accelerator = _run(snippet)["accelerator"]
    assert accelerator.state.mixed_precision == "fp16" and accelerator.native_amp
    assert type(accelerator.scaler) is torch.amp.GradScaler
    assert _settings(accelerator.scaler) == _expected(CASES[case])


def test_accelerate_on_cpu_builds_no_scaler_and_ignores_deepspeed_and_megatron(fresh_accelerate):
    """What the snippet's comments say, read from the installed accelerate."""
    from accelerate import Accelerator

    snippet = paste_lines(ODD, "cpu")["accelerate"]
    assert "DeepSpeed and Megatron-LM" in snippet and "On CPU" in snippet
    assert "DeepSpeed" not in paste_lines(DEFAULT)["accelerate"]
    accelerator = _run(snippet)["accelerator"]
    assert accelerator.device.type == "cpu" and accelerator.scaler is None
    assert accelerator.scaler_handler.to_kwargs() == dict(zip(PARAM_NAMES, _expected(ODD)))
    source = inspect.getsource(Accelerator.__init__)
    assert 'self.device.type != "cpu"' in source
    assert "distributed_type not in (DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM)" in source


def _lightning_trainer(snippet: str, **flags: str) -> object:
    extra = "".join(f"{name}={value!r}, " for name, value in flags.items())
    quiet = (
        'accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, '
    )
    assert snippet.count("Trainer(plugins=") == 1, snippet
    return _run(snippet.replace("Trainer(plugins=", f"Trainer({quiet}{extra}plugins="))["trainer"]


@pytest.mark.parametrize("case", CASES)
def test_lightning(case):
    need("lightning")
    from lightning.pytorch.plugins import MixedPrecision

    snippet = paste_lines(CASES[case], "cpu")["lightning"]
    code = "\n".join(line for line in snippet.splitlines() if not line.startswith("#"))
    assert "precision=" not in code.replace('MixedPrecision(precision="16-mixed"', "")
    trainer = _lightning_trainer(snippet)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision) and plugin.precision == "16-mixed"
    assert trainer.strategy.precision_plugin is plugin and type(plugin.scaler) is torch.amp.GradScaler
    assert plugin.scaler._device == "cpu"
    assert _settings(plugin.scaler) == _expected(CASES[case])


def test_lightning_refuses_precision_next_to_the_plugin():
    need("lightning")
    with pytest.raises(ValueError, match="Received both `precision=16-mixed` and `plugins="):
        _lightning_trainer(paste_lines(ODD, "cpu")["lightning"], precision="16-mixed")


def test_lightning_names_come_from_one_package():
    """pytorch_lightning has its own classes: its Trainer refuses the snippet's lightning.pytorch plugin."""
    pytorch_lightning = need("pytorch_lightning")
    flags = _run(paste_lines(ODD, "cpu")["lightning"].replace("trainer = Trainer(", "flags = dict("))["flags"]
    with pytest.raises(Exception, match="Found invalid type for plugin"):
        pytorch_lightning.Trainer(accelerator="cpu", devices=1, logger=False, **flags)


def test_lightning_plain_precision_flag_has_no_scaler_on_cpu():
    """Why even the default snippet uses the plugin: the flag alone turns fp16 into bf16 on CPU."""
    need("lightning")
    from lightning.pytorch import Trainer

    with pytest.warns(UserWarning, match="Using `precision='bf16-mixed'` instead"):
        trainer = Trainer(
            accelerator="cpu", devices=1, logger=False, precision="16-mixed", enable_checkpointing=False
        )
    assert trainer.precision_plugin.precision == "bf16-mixed" and trainer.precision_plugin.scaler is None


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.linear(x).squeeze(-1)
        return {"loss": ((out.float() - labels) ** 2).mean(), "logits": out}


def _training_args(tmp_path, args=None) -> object:
    from transformers import TrainingArguments

    cpu = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": [], "max_steps": 2}
    cpu |= {
        "per_device_train_batch_size": 2,
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
    }
    return TrainingArguments(fp16=True, **cpu) if args is None else dataclasses.replace(args, **cpu)


@pytest.mark.parametrize("case", CASES)
def test_hf_trainer(case, tmp_path, fresh_accelerate):
    """The scaler the real Trainer's accelerator builds, then uses in two real training steps."""
    transformers = need("transformers")
    snippet = paste_lines(CASES[case], "cuda")["hf_trainer"]
    namespace = _run(snippet)
    if case == "default":  # The plain Trainer with the snippet's own TrainingArguments.
        trainer_class, args = transformers.Trainer, _training_args(tmp_path, namespace["args"])
    else:
        trainer_class, args = namespace["ScalerTrainer"], _training_args(tmp_path)
    assert args.fp16 and args.mixed_precision == "fp16"
    data = [{"x": torch.randn(4), "labels": torch.randn(())} for _ in range(8)]
    with as_on_a_gpu():
        trainer = trainer_class(model=_Tiny(), args=args, train_dataset=data)
    scaler = trainer.accelerator.scaler
    assert type(scaler) is torch.amp.GradScaler
    assert _settings(scaler) == _expected(CASES[case])
    with mock.patch.object(scaler, "update", wraps=scaler.update) as update:
        trainer.train()
    assert trainer.optimizer.scaler is scaler  # The optimizer accelerate wrapped steps through it...
    assert update.call_count == 2  # ... and did, once per training step.
    assert _settings(scaler) == _expected(CASES[case])


def test_hf_trainer_hands_the_handler_to_accelerate_on_cpu(tmp_path, fresh_accelerate):
    """Without the GPU view the settings still reach the Accelerator (which uses no scaler on CPU)."""
    need("transformers")
    trainer_class = _run(paste_lines(ODD, "cpu")["hf_trainer"])["ScalerTrainer"]
    trainer = trainer_class(model=_Tiny(), args=_training_args(tmp_path))
    assert trainer.accelerator.scaler is None
    assert trainer.accelerator.scaler_handler.to_kwargs() == dict(zip(PARAM_NAMES, _expected(ODD)))


def test_a_missing_framework_fails_naming_the_install_command():
    with pytest.raises(pytest.fail.Exception, match=r"pip install -e '\.\[dev\]'"):
        need("no_such_framework_here")

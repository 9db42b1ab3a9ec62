"""Reading a checkpoint as people have them into a :class:`~search.tasks._start.StartState`.

* a Hugging Face Trainer ``checkpoint-N/`` directory: weights in ``model.safetensors`` (sharded or not) or
  ``pytorch_model.bin``, ``optimizer.pt``, ``scheduler.pt``, ``scaler.pt`` when the run had one,
  ``trainer_state.json`` (its ``global_step``);
* an accelerate ``save_state`` directory: ``model.safetensors`` or ``pytorch_model.bin``, ``optimizer.bin``,
  ``scheduler.bin``, ``scaler.pt``; accelerate keeps no global step, so the directory is named ``step_N``
  as accelerate's own examples name theirs (``examples/complete_nlp_example.py``: ``f"step_{overall_step}"``);
* a Lightning ``.ckpt`` file: ``state_dict``, ``optimizer_states``, ``lr_schedulers``, ``global_step`` and
  the ``MixedPrecision`` plugin's GradScaler state;
* a plain ``torch.save`` dict with the keys of PyTorch's AMP recipe (``model``, ``optimizer``, ``scaler``)
  plus ``step`` (the optimizer steps taken, skipped ones included) and optionally ``scheduler``.

Whatever cannot be read, or is not one of these, is a :class:`~search.tasks._start.CheckpointError`: one line.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from search.tasks._start import CheckpointError, StartState

HF_TRAINER = "Hugging Face Trainer checkpoint"
ACCELERATE = "accelerate checkpoint"
LIGHTNING = "Lightning checkpoint"
PLAIN = "torch.save checkpoint"
PLAIN_KEYS = ("model", "step")  # Required; "optimizer", "scheduler" and "scaler" are read when present.


def read_checkpoint(path: str | Path) -> StartState:
    """The state a checkpoint holds, whichever of the formats above it is.

    Raises:
        CheckpointError: A missing or unreadable file, or a file in none of these formats.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "trainer_state.json").is_file():
            return _hf_trainer(path)
        if any(path.glob("random_states_*.pkl")) or (path / "optimizer.bin").is_file():
            return _accelerate(path)
        raise CheckpointError(
            f"checkpoint {path}: a directory that is neither a Hugging Face Trainer checkpoint"
            " (trainer_state.json) nor an accelerate save_state (optimizer.bin, random_states_0.pkl)"
        )
    if not path.exists():
        raise CheckpointError(f"checkpoint {path}: no such file or directory")
    saved = _load(path)
    if not isinstance(saved, dict):
        raise CheckpointError(f"checkpoint {path}: holds a {type(saved).__name__}, not a dict of states")
    if "pytorch-lightning_version" in saved or "state_dict" in saved and "global_step" in saved:
        return _lightning(path, saved)
    missing = [k for k in PLAIN_KEYS if k not in saved]
    if missing:
        raise CheckpointError(
            f"checkpoint {path}: a torch.save dict needs the keys {', '.join(PLAIN_KEYS)} (and optionally"
            f" optimizer, scheduler, scaler); it lacks {', '.join(missing)}"
        )
    return StartState(
        model_state=saved["model"],
        global_step=_step(path, saved["step"]),
        optimizer_state=saved.get("optimizer"),
        scheduler_state=saved.get("scheduler"),
        scaler_state=saved.get("scaler") or None,
        source=PLAIN,
        path=str(path),
    )


def _hf_trainer(path: Path) -> StartState:
    try:
        state = json.loads((path / "trainer_state.json").read_text())
        step = state["global_step"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: trainer_state.json has no readable global_step ({e})")
    scaler = _load(path / "scaler.pt") if (path / "scaler.pt").is_file() else None
    return StartState(
        model_state=_hf_weights(path),
        global_step=_step(path, step),
        optimizer_state=_load_if(path / "optimizer.pt"),
        scheduler_state=_load_if(path / "scheduler.pt"),
        scaler_state=scaler or None,  # Saved empty ({}) when the Trainer's scaler was disabled.
        source=HF_TRAINER,
        path=str(path),
        scheduler_on_skipped_step=False,
    )


def _accelerate(path: Path) -> StartState:
    name = path.resolve().name
    if not (name.startswith("step_") and name[5:].isdigit()):
        raise CheckpointError(
            f"checkpoint {path}: accelerate's save_state keeps no global step; name the directory step_N, N"
            " the optimizer steps taken, as accelerate's examples do"
        )
    if any(path.glob("optimizer_1.bin")) or any(path.glob("pytorch_model_1.bin")):
        raise CheckpointError(f"checkpoint {path}: several models or optimizers; a task trains one of each")
    scaler = _load(path / "scaler.pt") if (path / "scaler.pt").is_file() else None
    return StartState(
        model_state=_hf_weights(path),
        global_step=int(name[5:]),
        optimizer_state=_load_if(path / "optimizer.bin"),
        scheduler_state=_load_if(path / "scheduler.bin"),
        scaler_state=scaler or None,
        source=ACCELERATE,
        path=str(path),
        scheduler_on_skipped_step=False,
    )


def _hf_weights(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a ``save_pretrained`` directory: safetensors (one file or shards) or a .bin."""
    from safetensors.torch import load_file  # transformers' own dependency; only this format needs it.

    for index_name, loader in (
        ("model.safetensors.index.json", load_file),
        ("pytorch_model.bin.index.json", _load),
    ):
        index = path / index_name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise CheckpointError(f"checkpoint {path}: {index_name} cannot be read ({e})")
            weights: dict[str, torch.Tensor] = {}
            for shard in shards:
                weights.update(_read(path / shard, loader))
            return weights
    if (path / "model.safetensors").is_file():
        return _read(path / "model.safetensors", load_file)
    if (path / "pytorch_model.bin").is_file():
        return _load(path / "pytorch_model.bin")
    raise CheckpointError(f"checkpoint {path}: no model.safetensors or pytorch_model.bin in it")


def _lightning(path: Path, saved: dict[str, Any]) -> StartState:
    optimizers = saved.get("optimizer_states") or [None]
    schedulers = saved.get("lr_schedulers") or [None]
    if len(optimizers) > 1 or len(schedulers) > 1:
        raise CheckpointError(
            f"checkpoint {path}: {len(optimizers)} optimizers and {len(schedulers)} schedulers; a task trains"
            " one of each"
        )
    return StartState(
        model_state=_lightning_weights(saved["state_dict"]),
        global_step=_step(path, saved.get("global_step")),
        optimizer_state=optimizers[0],
        scheduler_state=schedulers[0],
        scaler_state=saved.get("MixedPrecision")
        or None,  # The AMP plugin's GradScaler, under its class name.
        source=LIGHTNING,
        path=str(path),
        scheduler_on_skipped_step=True,
    )


def _lightning_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A LightningModule's weights as its one child module's own: a module that holds the task's model as
    ``self.model`` saves ``model.0.weight``, ...; the task builds that model, whose keys are ``0.weight``."""
    prefixes = {key.split(".", 1)[0] for key in state}
    if len(prefixes) == 1 and all("." in key for key in state):
        prefix = f"{next(iter(prefixes))}."
        return {key[len(prefix) :]: value for key, value in state.items()}
    return state


def _step(path: Path, step: object) -> int:
    if isinstance(step, torch.Tensor) and step.numel() == 1:
        step = step.item()
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"checkpoint {path}: its step is {step!r}, not a whole number >= 0")
    return step


def _load_if(path: Path) -> Any:
    return _load(path) if path.is_file() else None


def _load(path: Path) -> Any:
    return _read(path, _torch_load)


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # The user's own file, named by them: states that hold more than tensors and numbers (a scheduler's
        # callable object, a LightningModule's hyper-parameters) load as torch.load did before 2.6.
        return torch.load(path, map_location="cpu", weights_only=False)


def _read(path: Path, loader: Any) -> Any:
    try:
        return loader(path)
    except CheckpointError:
        raise
    except Exception as e:  # A truncated or foreign file: one line, whatever the loader raised.
        raise CheckpointError(f"checkpoint {path}: cannot be read ({type(e).__name__}: {_first_line(e)})")


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else "no message"

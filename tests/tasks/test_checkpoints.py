"""Checkpoints as the real libraries write them, read, then continued as an independent plain loop goes on.

Each checkpoint is written in the test by the library itself on the CPU (Hugging Face Trainer's
``checkpoint-N/``, Lightning's ``.ckpt``), then a task continues it, once with a fresh scaler at a trial's
setting and once with the checkpoint's own scaler (as the run was), and :mod:`plain_resume`'s loop, which
reads the files itself, takes the same steps: losses, scales, skips and learning rates.
"""

from __future__ import annotations

import json

import torch
from torch import nn
from torch.utils.data import DataLoader

from search.scalers import ScalerConfig
from search.tasks import LoaderProblem, read_checkpoint, start_from
from search.training import train

from frameworks import as_on_a_gpu, need
from plain_resume import assert_same_steps, plain_steps

TRIAL = ScalerConfig(7.3e3, 1.6, 0.41, 2)  # No power of two; overflows and regrows within a few steps.
SAVED_AT, MORE = 3, 6
SEED = 5


class Tiny(nn.Module):
    """A model as a Hugging Face Trainer trains it: ``model(**batch)`` returns its loss."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.linear(x).squeeze(-1)
        return {"loss": ((out.float() - labels) ** 2).mean(), "logits": out}


def samples() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        {"x": torch.randn(4, generator=generator) * 3, "labels": torch.randn((), generator=generator)}
        for _ in range(64)
    ]


def trainer_groups(params) -> torch.optim.Optimizer:  # noqa: ANN001
    # The Trainer's two groups: weights with weight decay, biases without (Trainer.create_optimizer).
    weight, bias = list(params)
    return torch.optim.AdamW([{"params": [weight]}, {"params": [bias], "weight_decay": 0.0}], lr=5e-3)


def cosine(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=SAVED_AT + MORE)


def hf_task() -> LoaderProblem:
    torch.manual_seed(SEED)
    return LoaderProblem(
        model=Tiny(),
        train_batches=DataLoader(samples(), batch_size=4, shuffle=True),
        make_optimizer=trainer_groups,
        steps=MORE,
        make_scheduler=cosine,
        seed=SEED,
    )


def write_trainer_checkpoint(tmp_path) -> str:
    """The real Trainer trains in fp16 and saves ``checkpoint-SAVED_AT`` with its scaler on the way."""
    transformers = need("transformers")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        max_steps=SAVED_AT + MORE,
        save_steps=SAVED_AT,
        per_device_train_batch_size=4,
        logging_strategy="no",
        disable_tqdm=True,
        fp16=True,
        learning_rate=5e-3,
        lr_scheduler_type="cosine",
        warmup_steps=2,
    )
    torch.manual_seed(0)
    with as_on_a_gpu():
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=samples())
    trainer.train()
    return str(tmp_path / f"checkpoint-{SAVED_AT}")


def plain_hf_continue(problem: LoaderProblem, directory: str, scaler: torch.amp.GradScaler | None):
    """Reads the Trainer's files itself and goes on MORE steps as the Trainer would (no scheduler step on a
    skipped step); ``scaler`` None continues ``scaler.pt``."""
    from safetensors.torch import load_file

    step = json.loads(open(f"{directory}/trainer_state.json").read())["global_step"]
    model = Tiny()
    model.load_state_dict(load_file(f"{directory}/model.safetensors"))
    optimizer = trainer_groups(model.parameters())
    scheduler = cosine(optimizer)
    optimizer.load_state_dict(torch.load(f"{directory}/optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(f"{directory}/scheduler.pt", weights_only=True))
    if scaler is None:
        scaler = torch.amp.GradScaler("cpu")
        scaler.load_state_dict(torch.load(f"{directory}/scaler.pt", weights_only=True))
    # The task's batches as docs/tasks.md draws them: the loader iterated with the global RNG seeded.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(problem.seed)
        batches = [b for _ in range(2) for b in problem.train_batches][step : step + MORE]
    losses = [lambda m, b=b: m(**b)["loss"] for b in batches]
    return step, plain_steps(model, optimizer, scheduler, scaler, losses, step, problem.seed, on_skip=False)


def test_a_hugging_face_trainer_checkpoint_continues_as_the_plain_loop_does(tmp_path, fresh_accelerate):
    directory = write_trainer_checkpoint(tmp_path)
    start = read_checkpoint(directory)
    assert (start.global_step, start.source) == (SAVED_AT, "Hugging Face Trainer checkpoint")
    assert start.scheduler_on_skipped_step is False  # transformers' trainer.py: not after a skipped step
    saved = torch.load(f"{directory}/scaler.pt", weights_only=True)
    assert start.scaler_setting() == ScalerConfig(saved["scale"], 2.0, 0.5, 2000)
    problem = start_from(hf_task(), start)

    fresh = train(problem, TRIAL, steps=MORE, fp32_reference=False)
    step, plain = plain_hf_continue(hf_task(), directory, torch.amp.GradScaler("cpu", **TRIAL.values))
    assert step == SAVED_AT
    assert_same_steps(fresh, plain, SAVED_AT)
    skip = plain.skipped.index(True)
    assert skip < MORE - 1 and fresh.lr_curve[skip + 1] == fresh.lr_curve[skip]  # no schedule step on a skip

    as_run = train(problem, start.scaler_setting(), steps=MORE, fp32_reference=False, continue_scaler=True)
    assert_same_steps(as_run, plain_hf_continue(hf_task(), directory, None)[1], SAVED_AT)

"""Checkpoints as the real libraries write them, read, then continued as an independent plain loop goes on.

Each checkpoint is written in the test by the library itself on the CPU (Hugging Face Trainer's
``checkpoint-N/``, Lightning's ``.ckpt``), then a task continues it, once with a fresh scaler at a trial's
setting and once with the checkpoint's own scaler (as the run was), and :mod:`plain_resume`'s loop, which
reads the files itself, takes the same steps: losses, scales, skips and learning rates.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from search.scalers import ScalerConfig
from search.tasks import LoaderProblem, Problem, read_checkpoint, start_from
from search.training import train

from frameworks import as_on_a_gpu, need
from plain_loop import _batches
from plain_resume import assert_same_steps, loaded, plain_steps

# The plain loops and Lightning step the scheduler after a skipped first step, as PyTorch's recipe does.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
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


def trainer_groups(model: nn.Module):  # noqa: ANN201
    """The Trainer's two optimizer groups, as docs/tasks.md builds them: weights with weight decay, the rest
    without (``Trainer.get_decay_parameter_names``), in parameter order."""
    from transformers import Trainer

    decays = [n in Trainer.get_decay_parameter_names(None, model) for n, _ in model.named_parameters()]

    def optimizer(params) -> torch.optim.Optimizer:  # noqa: ANN001
        params = list(params)
        return torch.optim.AdamW(
            [
                {"params": [p for p, d in zip(params, decays) if d]},
                {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0},
            ],
            lr=5e-3,
        )

    return optimizer


def cosine(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=SAVED_AT + MORE)


def hf_task() -> LoaderProblem:
    torch.manual_seed(SEED)
    model = Tiny()
    return LoaderProblem(
        model=model,
        train_batches=DataLoader(samples(), batch_size=4, shuffle=True),
        make_optimizer=trainer_groups(model),
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
    states = [load_file(f"{directory}/model.safetensors")]
    states += [
        torch.load(f"{directory}/{name}", weights_only=True) for name in ("optimizer.pt", "scheduler.pt")
    ]
    states.append(torch.load(f"{directory}/scaler.pt", weights_only=True))
    model = Tiny()
    model, optimizer, scheduler, scaler = loaded(model, trainer_groups(model), cosine, tuple(states), scaler)
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
    assert start.optimizer_state["state"]  # Adam's moments: the run took steps before it was saved
    problem = start_from(hf_task(), start)

    fresh = train(problem, TRIAL, steps=MORE, fp32_reference=False)
    step, plain = plain_hf_continue(hf_task(), directory, torch.amp.GradScaler("cpu", **TRIAL.values))
    assert step == SAVED_AT
    assert_same_steps(fresh, plain, SAVED_AT)
    skip = plain.skipped.index(True)
    assert skip < MORE - 1 and fresh.lr_curve[skip + 1] == fresh.lr_curve[skip]  # no schedule step on a skip
    # The batches of the steps before the checkpoint were drawn (the order is the run's) but not kept.
    assert {k: len(v) for k, v in problem._drawn.items() if k.startswith("train@")} == {
        f"train@{SAVED_AT}": MORE
    }

    as_run = train(problem, start.scaler_setting(), steps=MORE, fp32_reference=False, continue_scaler=True)
    assert_same_steps(as_run, plain_hf_continue(hf_task(), directory, None)[1], SAVED_AT)


LIGHTNING_SAVED_AT, LIGHTNING_MORE = 5, 6
LIGHTNING_SCALER = dict(init_scale=3.1e3, growth_factor=1.3, backoff_factor=0.62, growth_interval=2)


def lightning_problem() -> Problem:
    """A task whose model is the one a LightningModule holds as ``self.model``."""
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(256, 8, generator=generator) * 4
    torch.manual_seed(3)
    return Problem(
        model=nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)),
        inputs=inputs,
        targets=inputs[:, :1] * 3,
        loss_fn=nn.MSELoss(),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=2e-3, momentum=0.9),
        make_scheduler=lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7),
        epochs=1,
        batch_size=32,
        shuffle_seed=9,
    )


def continue_plainly(
    states: tuple, first: int, more: int, on_skip: bool, scaler: torch.amp.GradScaler | None
):
    """lightning_problem's model, optimizer and scheduler loaded with ``states`` (weights, optimizer,
    scheduler, scaler), then ``more`` steps of the plain loop on the task's own batches from global step
    ``first``; ``scaler`` None continues the saved scaler."""
    problem = lightning_problem()
    model, optimizer, scheduler, scaler = loaded(
        problem.model, problem.make_optimizer, problem.make_scheduler, states, scaler
    )
    x, y = problem.inputs, problem.targets
    losses = [
        lambda m, i=index: problem.loss_fn(m(x[i]), y[i])
        for (index,) in _batches(problem, first + more)[first:]
    ]
    return plain_steps(model, optimizer, scheduler, scaler, losses, first, problem.shuffle_seed, on_skip)


def write_lightning_checkpoint(tmp_path) -> str:
    """The real Lightning Trainer trains LIGHTNING_SAVED_AT steps under its fp16 plugin and saves a .ckpt."""
    lightning = need("lightning.pytorch")
    from lightning.pytorch.plugins import MixedPrecision

    problem = lightning_problem()

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = problem.model

        def training_step(self, batch, batch_index):  # noqa: ANN001, ANN201
            return problem.loss_fn(self.model(batch[0]), batch[1])

        def configure_optimizers(self):  # noqa: ANN201
            optimizer = problem.make_optimizer(self.parameters())
            scheduler = problem.make_scheduler(optimizer)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    data = DataLoader(list(zip(problem.inputs, problem.targets)), batch_size=32)
    plugin = MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu", **LIGHTNING_SCALER))
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=LIGHTNING_SAVED_AT,
        plugins=[plugin],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), data)
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    return str(path)


def test_a_lightning_checkpoint_continues_as_the_plain_loop_does(tmp_path):
    """Lightning steps the scheduler on every step, skipped or not (its training loop's update_lr_schedulers),
    and saves GradScaler's state under its plugin's name."""
    path = write_lightning_checkpoint(tmp_path)
    start = read_checkpoint(path)
    assert (start.global_step, start.source, start.scheduler_on_skipped_step) == (
        5,
        "Lightning checkpoint",
        True,
    )
    saved = torch.load(path, weights_only=False)
    assert start.scaler_state == saved["MixedPrecision"] and start.scaler_state["growth_factor"] == 1.3
    assert saved["optimizer_states"][0]["state"]  # momentum buffers: the run took steps before it was saved
    problem = start_from(lightning_problem(), start)

    states = (
        {k.removeprefix("model."): v for k, v in saved["state_dict"].items()},
        saved["optimizer_states"][0],
        saved["lr_schedulers"][0],
        saved["MixedPrecision"],
    )

    def plain(scaler: torch.amp.GradScaler | None):
        return continue_plainly(states, saved["global_step"], LIGHTNING_MORE, True, scaler)

    fresh = train(problem, TRIAL, steps=LIGHTNING_MORE, fp32_reference=False)
    expected = plain(torch.amp.GradScaler("cpu", **TRIAL.values))
    assert_same_steps(fresh, expected, 5)
    assert any(expected.skipped) and not all(expected.skipped)
    as_run = train(
        problem, start.scaler_setting(), steps=LIGHTNING_MORE, fp32_reference=False, continue_scaler=True
    )
    assert_same_steps(as_run, plain(None), 5)


ACCELERATE_SAVED_AT = 4


def write_accelerate_checkpoint(tmp_path) -> str:
    """A plain accelerate loop trains ACCELERATE_SAVED_AT steps in fp16 and saves its state as its examples
    do, in ``step_N``."""
    need("accelerate")
    from accelerate import Accelerator
    from accelerate.utils import GradScalerKwargs

    problem = lightning_problem()
    with as_on_a_gpu():  # accelerate builds its GradScaler only on a GPU: built as there.
        accelerator = Accelerator(
            mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(**LIGHTNING_SCALER)]
        )
    model = problem.model
    optimizer = problem.make_optimizer(model.parameters())
    scheduler = problem.make_scheduler(optimizer)
    data = DataLoader(list(zip(problem.inputs, problem.targets)), batch_size=32)
    model, optimizer, data, scheduler = accelerator.prepare(model, optimizer, data, scheduler)
    for _, (x, y) in zip(range(ACCELERATE_SAVED_AT), data):
        with accelerator.autocast():
            loss = problem.loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    directory = tmp_path / f"step_{ACCELERATE_SAVED_AT}"
    accelerator.save_state(str(directory))
    return str(directory)


def test_an_accelerate_checkpoint_continues_as_the_plain_loop_does(tmp_path, fresh_accelerate):
    """accelerate does not step the scheduler on a skipped step (its AcceleratedScheduler.step returns)."""
    directory = write_accelerate_checkpoint(tmp_path)
    start = read_checkpoint(directory)
    assert (start.global_step, start.source) == (ACCELERATE_SAVED_AT, "accelerate checkpoint")
    assert start.scheduler_on_skipped_step is False
    from safetensors.torch import load_file

    states = (
        load_file(f"{directory}/model.safetensors"),
        torch.load(f"{directory}/optimizer.bin", weights_only=True),
        torch.load(f"{directory}/scheduler.bin", weights_only=True),
        torch.load(f"{directory}/scaler.pt", weights_only=True),
    )
    assert states[3]["scale"] < LIGHTNING_SCALER["init_scale"]  # the run backed off before it was saved
    assert states[1]["state"]  # and took steps: momentum buffers
    problem = start_from(lightning_problem(), start)
    fresh = train(problem, TRIAL, steps=LIGHTNING_MORE, fp32_reference=False)
    expected = continue_plainly(states, 4, LIGHTNING_MORE, False, torch.amp.GradScaler("cpu", **TRIAL.values))
    assert_same_steps(fresh, expected, 4)
    skip = expected.skipped.index(True)
    assert skip < LIGHTNING_MORE - 1 and fresh.lr_curve[skip + 1] == fresh.lr_curve[skip]
    as_run = train(
        problem, start.scaler_setting(), steps=LIGHTNING_MORE, fp32_reference=False, continue_scaler=True
    )
    assert_same_steps(as_run, continue_plainly(states, 4, LIGHTNING_MORE, False, None), 4)

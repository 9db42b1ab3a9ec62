"""What a checkpoint reader refuses, in one line naming the file, and the layouts it reads besides the ones
the real libraries wrote in test_checkpoints.py: sharded safetensors, a ``pytorch_model.bin``, a step saved
as a tensor, a LightningModule whose weights have no common prefix."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from search.tasks import CheckpointError, Problem, StartState, read_checkpoint, start_from


def small_problem(**fields) -> Problem:
    torch.manual_seed(0)
    return Problem(
        model=nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)),
        inputs=torch.randn(16, 4),
        targets=torch.randint(0, 2, (16,)),
        loss_fn=nn.CrossEntropyLoss(),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=1e-2),
        epochs=1,
        **fields,
    )


def hf_directory(path, weights: dict, state: dict | None = None):  # noqa: ANN201
    path.mkdir()
    (path / "trainer_state.json").write_text(json.dumps(state if state is not None else {"global_step": 7}))
    for name, content in weights.items():
        if name.endswith(".safetensors"):
            from safetensors.torch import save_file

            save_file(content, str(path / name))
        elif name.endswith(".json"):
            (path / name).write_text(json.dumps(content))
        else:
            torch.save(content, path / name)
    return path


def test_sharded_safetensors_and_a_bin_are_read_as_the_model_s_weights(tmp_path):
    weights = {k: v.clone() + 1 for k, v in small_problem().model.state_dict().items()}
    first = {k: v for k, v in weights.items() if k.startswith("0.")}
    second = {k: v for k, v in weights.items() if k.startswith("2.")}
    index = {"weight_map": {k: "a.safetensors" for k in first} | {k: "b.safetensors" for k in second}}
    sharded = hf_directory(
        tmp_path / "sharded",
        {"a.safetensors": first, "b.safetensors": second, "model.safetensors.index.json": index},
    )
    binary = hf_directory(tmp_path / "bin", {"pytorch_model.bin": weights})
    for directory in (sharded, binary):
        start = read_checkpoint(directory)
        assert start.global_step == 7 and start.optimizer_state is None and start.scaler_state is None
        loaded = start_from(small_problem(), start).model.state_dict()
        assert all(torch.equal(loaded[k], weights[k]) for k in weights)


def test_a_step_saved_as_a_tensor_and_unprefixed_lightning_weights(tmp_path):
    weights = small_problem().model.state_dict()
    torch.save({"model": weights, "step": torch.tensor(5)}, tmp_path / "plain.pt")
    assert read_checkpoint(tmp_path / "plain.pt").global_step == 5
    torch.save(
        {"state_dict": dict(weights), "global_step": 9, "pytorch-lightning_version": "2.6"},
        tmp_path / "l.ckpt",
    )
    start = read_checkpoint(tmp_path / "l.ckpt")
    assert start.global_step == 9 and set(start.model_state) == set(weights)  # two prefixes (0., 2.): kept


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.mkdir() or p, "neither a Hugging Face Trainer checkpoint"),
        (lambda p: hf_directory(p, {}, {"epoch": 1}), "trainer_state.json has no readable global_step"),
        (lambda p: hf_directory(p, {}), "no model.safetensors or pytorch_model.bin in it"),
        (lambda p: hf_directory(p, {"model.safetensors.index.json": "["}), "cannot be read"),
    ],
)
def test_directories_that_cannot_be_read(tmp_path, make, message):
    path = make(tmp_path / "checkpoint-7")
    with pytest.raises(CheckpointError, match=message) as e:
        read_checkpoint(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_accelerate_needs_its_step_in_the_name_and_one_optimizer(tmp_path):
    for name, files in (("latest", ["optimizer.bin"]), ("step_4", ["optimizer.bin", "optimizer_1.bin"])):
        path = tmp_path / name
        path.mkdir()
        for file in files:
            torch.save({}, path / file)
        with pytest.raises(CheckpointError, match="name the directory step_N|several models or optimizers"):
            read_checkpoint(path)


def test_lightning_with_two_optimizers_is_refused(tmp_path):
    saved = {
        "state_dict": {},
        "global_step": 3,
        "optimizer_states": [{}, {}],
        "pytorch-lightning_version": "2.6",
    }
    torch.save(saved, tmp_path / "two.ckpt")
    with pytest.raises(CheckpointError, match="2 optimizers and 1 schedulers; a task trains one of each"):
        read_checkpoint(tmp_path / "two.ckpt")


def test_states_that_do_not_fit_the_task_are_one_line():
    model = small_problem().model
    weights = model.state_dict()
    other = torch.optim.SGD([{"params": [p]} for p in model.parameters()], lr=0.1).state_dict()
    scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=0.1), 2).state_dict()
    cases = [
        (small_problem(), StartState(weights, 3, optimizer_state=other), "its optimizer state does not fit"),
        (
            small_problem(),
            StartState(weights, 3, scheduler_state=scheduler),
            "holds a learning-rate scheduler's",
        ),
        (
            small_problem(make_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 2)),
            StartState(weights, 3),
            "holds no scheduler state, so where the task's schedule was at step 3 is unknown",
        ),
    ]
    for problem, start, message in cases:
        with pytest.raises(CheckpointError, match=message):
            start_from(problem, start)
    with pytest.raises(CheckpointError, match="its step must be a whole number >= 0"):
        StartState(weights, -1)
    lacks = "its scaler state is no saved scaler this reads: it lacks _growth_tracker of GradScaler's"
    with pytest.raises(CheckpointError, match=lacks):
        StartState(
            weights,
            1,
            scaler_state={"scale": 2.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 9},
        )
    assert StartState(weights, 1).scaler_setting() is None


def test_a_tied_weight_left_out_of_the_checkpoint_is_loaded_through_the_one_it_shares():
    """save_pretrained writes an LM head tied to the embedding once: the key left out is not missing."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(x))

    torch.manual_seed(1)
    problem = Problem(
        Tied(),
        torch.zeros(4, dtype=torch.long),
        torch.zeros(4, dtype=torch.long),
        nn.CrossEntropyLoss(),
        lambda p: torch.optim.SGD(p, lr=0.1),
        1,
    )
    saved = {"embed.weight": torch.full((5, 3), 0.25)}
    model = start_from(problem, StartState(saved, 2)).model
    assert torch.equal(model.head.weight, saved["embed.weight"]) and model.head.weight is model.embed.weight
    # Either key of the tied pair will do; a key the model does not have will not.
    with pytest.raises(CheckpointError, match="does not fit the task's model: extra extra$"):
        start_from(problem, StartState({"head.weight": torch.zeros(5, 3), "extra": torch.zeros(1)}, 2))

"""LoaderProblem: batches of any structure drawn once per process and fed identically to every trial,
their bytes in the fingerprint, the loss a training script uses, and one clear line for what cannot work."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from search.scalers import ScalerConfig
from search.tasks import BatchError, LoaderProblem
from search.training import PopulationError, check_population, train

from conftest import run_cli


def _data(seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(96, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def _problem(seed: int = 0, **changes) -> LoaderProblem:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.25), nn.Linear(8, 1))
    options = {
        "train_batches": DataLoader(_data(seed), batch_size=16, shuffle=True),
        "loss_fn": nn.functional.mse_loss,
        "seed": seed,
    } | changes
    return LoaderProblem(model, make_optimizer=lambda p: torch.optim.SGD(p, lr=0.05), steps=10, **options)


def test_batches_are_drawn_once_in_a_seeded_order_and_cycle_through_passes():
    problem = _problem()
    planned = problem.planned(10)  # 6 batches a pass: the second pass is reshuffled, the same each time
    again = _problem().planned(10)
    assert len(planned) == 10 and all(len(step) == 1 for step in planned)
    assert all(torch.equal(a[0][0], b[0][0]) for a, b in zip(planned, again))
    assert not torch.equal(planned[0][0][0], planned[6][0][0])  # a new pass, a new order
    assert problem.planned(10)[3][0] is planned[3][0]  # kept, not drawn again
    assert len(problem.evaluation_batches()) == 6  # judged on one pass of the training batches


def test_the_fingerprint_holds_the_batches_weights_and_steps():
    assert _problem().fingerprint(10) == _problem().fingerprint(10)
    assert _problem().fingerprint(10) != _problem().fingerprint(11)
    other_data = _problem(train_batches=DataLoader(_data(1), batch_size=16, shuffle=True))
    assert other_data.fingerprint(10) != _problem().fingerprint(10)


def test_a_factory_and_nested_batches_with_a_loss_of_their_own():
    def batches():  # A fresh generator per call: a factory can be iterated again.
        for x, y in DataLoader(_data(0), batch_size=32):
            yield {"features": (x, x * 2), "target": {"y": y}}

    def loss(model, batch):
        return nn.functional.mse_loss(model(batch["features"][0]), batch["target"]["y"])

    problem = _problem(train_batches=batches, loss=loss, loss_fn=None)
    result = train(problem, ScalerConfig(1000.0, 2.0, 0.5, 2000), steps=5)
    assert len(result.loss_curve) == 5 and result.eval_loss < result.initial_eval_loss


def test_a_generator_runs_once_and_says_so():
    generator = iter(DataLoader(_data(0), batch_size=16))
    with pytest.raises(
        BatchError, match=r"only 6 batches of the 10 that 10 steps need: give a DataLoader or a callable"
    ):
        _problem(train_batches=generator).planned(10)


def test_a_batch_without_a_loss_names_what_to_give():
    with pytest.raises(BatchError, match=r"give LoaderProblem\(loss=lambda model, batch: \.\.\.\)"):
        _problem(loss_fn=None).loss_of(nn.Linear(4, 1), torch.zeros(2, 4))


def test_population_mode_and_epochs_are_refused_in_one_line(tmp_path):
    with pytest.raises(PopulationError, match="LoaderProblem"):
        check_population(_problem())
    for flags, said in (
        (["--population", "2"], "population mode stacks a Problem of two tensors only"),
        (["--epochs", "3"], "runs --steps, not --epochs"),
    ):
        proc = run_cli(["--task", "examples.hf_causal_lm:build", "--trials", "3", *flags], tmp_path)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert not (tmp_path / "study.db").exists()


def test_batches_over_the_memory_limit_are_refused_before_anything_is_written(tmp_path):
    """40 steps of the HF example's batches take about 0.3 MiB: under --batch-memory 0.1 that is refused in
    one line."""
    proc = run_cli(
        ["--task", "examples.hf_causal_lm:build", "--trials", "3", "--batch-memory", "0.1"], tmp_path
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert (
        "MiB, held once per process, over --batch-memory 0.1: raise it, or run fewer --steps" in proc.stderr
    )
    assert not (tmp_path / "study.db").exists()

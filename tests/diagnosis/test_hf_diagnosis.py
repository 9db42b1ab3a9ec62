"""A diagnosis of a Hugging Face BERT classifier (examples/hf_bert_classifier.py: dict batches, dropout 0.1),
checked against independent plain loops (tests/plain_loader_loop.py's batches and seeds): its attention key
bias, whose gradient softmax makes zero by construction, does not set the needed scale, and no suggestion is
given that a plain loop finds worse than the settings diagnosed."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from search.diagnosis import (
    HEALTHY_ADVICE,
    checked_suggestion,
    diagnosis_runs,
    judge,
    suggestion_of,
    suggestion_run,
)
from search.scalers import ScalerConfig
from search.tasks import build_problem

from conftest import example_build
from plain_loader_loop import _draw, _loss, plain_loader_run

STEPS = 40
DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)


@pytest.fixture(scope="module")
def diagnosed():
    torch.set_num_threads(1)
    problem = build_problem(
        example_build("hf_bert_classifier", "transformers"), "examples.hf_bert_classifier:build", 42
    )
    runs = diagnosis_runs(problem, DEFAULT, steps=STEPS, controls=("fp32",))
    return problem, runs, judge(runs.fp16, runs.fp32, runs.bf16, DEFAULT)


def _plain_fp32_first_steps(problem, first: int) -> dict[str, tuple[float, float]]:
    """Per parameter, over a plain fp32 loop's first steps: the smallest per-step floor (the smallest entry
    whose smaller entries carry under a tenth of the squared norm) and the summed squared norm."""
    model = copy.deepcopy(problem.model)
    optimizer = problem.make_optimizer(list(model.parameters()))
    batches = _draw(problem.train_batches, first, problem.seed)
    out = {name: (np.inf, 0.0) for name, _ in model.named_parameters()}
    model.train()
    for step, batch in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        torch.manual_seed((problem.seed * 1_000_003 + step) % 2**63)
        _loss(problem, model, batch).backward()
        for name, p in model.named_parameters():
            values = np.sort(p.grad.detach().double().abs().flatten().numpy())
            values = values[values > 0]
            squares = values**2
            below = np.concatenate([[0.0], np.cumsum(squares)[:-1]])
            floor = values[below < 0.1 * squares.sum()][-1] if values.size else np.inf
            out[name] = (min(out[name][0], floor), out[name][1] + float(squares.sum()))
        optimizer.step()
    return out


def test_the_key_bias_is_rounding_noise_and_does_not_set_the_needed_scale(diagnosed):
    """In the plain loop the key biases carry under 2^-48 of the squared gradient norm (zero by construction,
    what is left is rounding), and would ask for a scale above 2^20 if they counted; the needed scale is the
    other parameters' (2^-24 over their smallest floor), far under PyTorch's 2^16, and the default is
    healthy: it skips nothing."""
    _problem, runs, verdict = diagnosed
    plain = _plain_fp32_first_steps(diagnosed[0], runs.fp32.start_steps)
    total = sum(norm for _floor, norm in plain.values())
    noise = {name for name, (_floor, norm) in plain.items() if norm < 2.0**-48 * total}
    assert noise == {f"bert.encoder.layer.{i}.attention.self.key.bias" for i in (0, 1)}
    measured = {p.name for p in runs.fp32.parameters} - {p.name for p in runs.fp32.counted()}
    assert measured == noise
    assert 2.0**-24 / min(plain[name][0] for name in noise) > 2.0**20  # what the key bias alone would ask
    counted = min(floor for name, (floor, _norm) in plain.items() if name not in noise)
    assert verdict.needed_scale == pytest.approx(2.0**-24 / counted, rel=1e-4)
    assert verdict.needed_scale < 2.0**16 and verdict.underflowing == ()
    assert verdict.verdict == "healthy" and runs.fp16.skipped_steps == 0


def test_no_suggestion_that_the_plain_loop_finds_worse(diagnosed):
    """The diagnosis's own proposal is trained before it is given, and the plain loop agrees with that run. A
    harmful proposal (the one this diagnosis gave when the key bias led it: 2^21, regrowing by 1.966 every
    step) skips steps and ends behind the default in the plain loop, and is withdrawn: the advice says the
    settings are fine, and names it with both runs' numbers."""
    problem, runs, verdict = diagnosed
    default = plain_loader_run(problem, 2.0**16, 2.0, 0.5, 2000, STEPS)
    assert runs.fp16.eval_loss == pytest.approx(default.eval_loss, rel=1e-5)
    proposals = [verdict]
    harmful = {"init_scale": 2.0**21, "growth_factor": 1.966, "backoff_factor": 0.5, "growth_interval": 1}
    proposals.append(type(verdict)(**{**verdict.__dict__, "suggested_setting": harmful}))
    for proposal in proposals:
        suggested = suggestion_of(proposal, DEFAULT)
        if suggested is None:  # it proposes nothing to train
            assert proposal.advice == HEALTHY_ADVICE
            continue
        trained = suggestion_run(problem, suggested, runs.fp32.zero_share, steps=STEPS)
        plain = plain_loader_run(problem, *suggested.values.values(), STEPS)
        assert trained.skipped_steps == plain.skipped and trained.failure == plain.failure
        assert trained.eval_loss == pytest.approx(plain.eval_loss, rel=1e-5)
        final = checked_suggestion(proposal, DEFAULT, trained, runs.fp16)
        worse = plain.eval_loss > default.eval_loss or plain.skipped > default.skipped
        if final.suggestion_check["kept"]:
            assert not worse and plain.eval_loss < 0.9 * default.eval_loss
            assert final.suggested_setting is not None
        else:
            assert final.advice.startswith(HEALTHY_ADVICE + "; the diagnosis's own proposal, init_scale 2^")
            assert f"{plain.skipped} of {STEPS} steps skipped" in final.advice
            assert final.suggested_setting is None and final.suggested_init_scale == 2.0**16
    assert worse and plain.skipped > 10  # the harmful one, as the issue measured it: many steps skipped

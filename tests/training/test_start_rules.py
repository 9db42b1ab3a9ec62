"""The run as it was under a framework's rule: a trial that continues the scaler the user's checkpoint saved,
against a plain loop that loads the same checkpoint and goes on with the framework's own scaler.

The checkpoint is written by a plain AMP loop whose scale DeepSpeed's own ``DynamicLossScaler`` (pickled
whole, as ZeRO saves it) or Megatron-LM's ``DynamicGradScaler`` (transcribed, its ``state_dict`` saved)
moves; the plain loop that goes on loads the weights, optimizer, scheduler and that scaler, and tells it each
step's overflow, read off the gradients.
"""

from __future__ import annotations

import pytest

from search.tasks import read_checkpoint, start_from
from search.training import train

from frameworks import PlainDynamicGradScaler, deepspeed_scaler
from plain_resume import DeepSpeedMoves, MegatronMoves, assert_same_steps, plain_rule_continue, save_rule_run
from tasks_for_tests import scheduled

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
SAVED_AT, RUN = 20, 16


@pytest.mark.parametrize("framework", ["deepspeed", "megatron"])
def test_the_run_as_it_was_goes_on_with_the_frameworks_own_counters(tmp_path, framework):
    """Losses, scales, skips and rates step for step as the plain loop's; started afresh at the same setting
    (a restart), the same run takes other steps: the counters the checkpoint saved matter."""
    if framework == "deepspeed":
        moves = DeepSpeedMoves(deepspeed_scaler(23, 3, 2, False, 1))
    else:
        moves = MegatronMoves(PlainDynamicGradScaler(1.37 * 2**22, **MegatronMoves.FLAGS))
    path = tmp_path / "run.pt"
    save_rule_run(scheduled(42), path, moves, SAVED_AT)
    start = read_checkpoint(path)
    assert start.scaler_rule.name == framework and start.scaler_assumed() == ""
    problem = start_from(scheduled(42), start)
    setting = start.scaler_setting()
    as_run = train(problem, setting, steps=RUN, fp32_reference=False, continue_scaler=True)
    plain = plain_rule_continue(scheduled(42), path, moves, SAVED_AT, RUN)
    assert_same_steps(as_run, plain, SAVED_AT)
    assert any(plain.skipped) and not all(plain.skipped)
    restart = train(problem, setting, steps=RUN, fp32_reference=False)
    assert restart.scale_curve != as_run.scale_curve

"""search.diagnosis reads real loss-scaler logs: DeepSpeed's written by DeepSpeed 0.19.8's own
DynamicLossScaler (its logger captured), apex's and fairseq's in their messages as their source writes them
(apex/amp/handle.py at 007c59472a94c69683b9315ee6844bcde1b15997; fairseq/trainer.py and
fairseq/optim/dynamic_loss_scaler.py at 0d77035ea39e28f30eb20030547fecaee39ff25d). The runs that write them
are simulated with a gradient ceiling: a step overflows when the scale is above it, as real gradients do; the
generator knows every skip and scale it wrote.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from search.diagnose import main as diagnose_main
from search.diagnosis import CHRONIC_RATE, HYSTERESIS, OVERFLOW, LogError, read_log

from conftest import run_cli


def deepspeed_log(
    steps: int, window: int, ceiling: float, init_power: int = 16, hysteresis: int = 2, print_every: int = 10
) -> tuple[list[str], dict]:
    """A DeepSpeed log: DeepSpeed's own scaler, a step overflowing when its scale is above ``ceiling``, and
    the engine's progress line every ``print_every`` steps (deepspeed/runtime/engine.py:
    ``log_dist(f"step={step}, skipped={self.skipped_steps}, lr={lr}, mom={mom}", ranks=[0])``, which prefixes
    ``[Rank 0] ``)."""
    from deepspeed.runtime.fp16 import loss_scaler
    from deepspeed.utils import logger

    loss_scaler.dist.get_rank = lambda *args, **kwargs: 0
    scaler = loss_scaler.DynamicLossScaler(
        init_scale=2**init_power,
        scale_window=window,
        min_scale=1,
        delayed_shift=hysteresis,
        consecutive_hysteresis=False,
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s")
    )
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: the logger caches what is enabled.
    skipped, ended, attempted = 0, False, []
    try:
        for step in range(1, steps + 1):
            overflow = scaler.cur_scale > ceiling
            if overflow:
                attempted.append(float(scaler.cur_scale))
            try:
                scaler.update_scale(overflow)
            except Exception as e:  # DeepSpeed raises a bare Exception at the minimum: the run ends.
                stream.write(f"Traceback (most recent call last):\n  ...\nException: {e}\n")
                ended = True
                break
            skipped += overflow
            if step % print_every == 0:
                stream.write(
                    f"[2026-12-06 04:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] step={step}, "
                    f"skipped={skipped}, lr=[0.0001], mom=[(0.9, 0.999)]\n"
                )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return stream.getvalue().splitlines(), {
        "skipped": skipped,
        "ended": ended,
        "attempted": attempted,
        "last": float(scaler.cur_scale),
        "steps": step,
    }


def halving_run(
    steps: int, window: int, ceiling: float, init: float
) -> tuple[list[tuple[int, float]], float]:
    """A dynamic scaler (x2 after ``window`` clean steps, /2 on an overflow, as apex's and fairseq's
    defaults): the (step, scale after the cut) of each overflow, and the final scale."""
    scale, clean, cuts = init, 0, []
    for step in range(1, steps + 1):
        if scale > ceiling:
            scale, clean = scale / 2, 0
            cuts.append((step, scale))
        else:
            clean += 1
            if clean % window == 0:
                scale *= 2
    return cuts, scale


def apex_log(cuts: list[tuple[int, float]]) -> list[str]:
    return [
        f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {scale}"
        for _, scale in cuts
    ]


def fairseq_log(cuts: list[tuple[int, float]], steps: int, every: int = 100) -> list[str]:
    by_step = dict(cuts)
    lines, scale = [], None
    for step in range(1, steps + 1):
        if step in by_step:
            scale = by_step[step]
            lines.append(
                "2026-12-06 04:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring "
                f"gradient, setting loss scale to: {scale}"
            )
        if step % every == 0:
            lines.append(
                '2026-12-06 04:00:00 | INFO | train_inner | {"epoch": 1, "update": 0.0, "loss": "3.1", '
                f'"num_updates": "{step}", "lr": "0.0001", "loss_scale": "{scale}"}}'
            )
    return lines


# -- DeepSpeed, through its own class -----------------------------------------------------------------


@pytest.mark.parametrize("window, verdict", [(1000, "healthy"), (20, "chronic-skipping")])
def test_deepspeeds_own_log_is_read_step_for_step(window, verdict):
    # The gradients fit a scale of 300: from 2^16 the scale halves down to 256 (hysteresis 2: every second
    # overflow cuts), then grows into 512 once per window and backs off.
    lines, truth = deepspeed_log(4000, window, ceiling=300.0)
    reading = read_log(lines)
    assert reading.frameworks == ("deepspeed",) and reading.steps == truth["steps"] == 4000
    assert reading.skipped_steps == truth["skipped"] == len(truth["attempted"])
    assert not reading.hit_minimum and reading.verdict == verdict
    # Every scale DeepSpeed attempted a skipped step at, in order, as its own class held it.
    assert [line.scale_before for line in reading.lines if line.kind in (OVERFLOW, HYSTERESIS)] == truth[
        "attempted"
    ]
    trace = [scale for _, _, scale in reading.scale_trace]
    assert trace[0] == 2**16 and min(trace) == 256 and all(a != b for a, b in zip(trace, trace[1:]))
    later_rate = reading.later_rate
    assert later_rate is not None and (later_rate >= CHRONIC_RATE) == (verdict == "chronic-skipping")
    # The initial search: the first overflow spends the hysteresis (2 -> 1, no cut), then each one cuts, and
    # 2^16 -> 2^8 is 8 cuts. The next skip is at 512, grown into (hysteresis refilled by the growth).
    assert reading.initial_skips == 9
    assert reading.later_skips == truth["skipped"] - 9


def test_deepspeed_ending_at_its_minimum_is_scale_collapse():
    lines, truth = deepspeed_log(
        500, 1000, ceiling=0.5, init_power=4
    )  # Gradients that overflow at any scale >= 1.
    reading = read_log(lines)
    assert truth["ended"] and reading.hit_minimum and reading.verdict == "scale-collapse"
    assert reading.skipped_steps == truth["skipped"] and min(s for _, _, s in reading.scale_trace) == 1


# -- apex and fairseq, in their source's words --------------------------------------------------------


@pytest.mark.parametrize("window, verdict", [(2000, "healthy"), (30, "chronic-skipping")])
def test_an_apex_log_needs_the_step_count_and_then_reads_as_the_run_went(window, verdict):
    cuts, last = halving_run(6000, window, ceiling=1000.0, init=65536.0)
    lines = ["Selected optimization level O1", *apex_log(cuts), "Epoch 3 done"]
    with pytest.raises(LogError, match="--steps"):
        read_log(lines)
    reading = read_log(lines, steps=6000)
    assert reading.frameworks == ("apex",) and reading.skipped_steps == len(cuts)
    assert reading.scale_trace[-1][2] == cuts[-1][1] and reading.verdict == verdict
    assert reading.initial_skips == 7  # 65536 -> 512: seven cuts (1024 is still above the ceiling of 1000)


@pytest.mark.parametrize(
    "window, ceiling, verdict",
    [(128 * 8, 1000.0, "healthy"), (16, 1000.0, "chronic-skipping"), (128, 1e-9, "scale-collapse")],
)
def test_a_fairseq_log_is_read_from_its_progress_and_overflow_lines(window, ceiling, verdict):
    cuts, _ = halving_run(3000, window, ceiling=ceiling, init=128.0)
    lines = fairseq_log(cuts, 3000)
    if verdict == "scale-collapse":  # fairseq's own end: the minimum 1e-4 reached (FloatingPointError).
        lines = fairseq_log([c for c in cuts if c[1] > 1e-4], 3000)[:40] + [
            "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. Try"
            " lowering the learning rate, using gradient clipping or increasing the batch size."
        ]
    reading = read_log(lines)
    assert reading.frameworks == ("fairseq",) and reading.verdict == verdict
    if verdict != "scale-collapse":
        assert reading.steps == 3000 and reading.skipped_steps == len(cuts)
    else:
        assert reading.hit_minimum


def test_a_log_without_loss_scaler_lines_is_refused():
    with pytest.raises(LogError, match="no loss-scaler line"):
        read_log(["epoch 1 loss 2.3", "epoch 2 loss 1.9"])


# -- the command ----------------------------------------------------------------------------------------


def test_the_command_prints_the_reading_and_writes_its_json(tmp_path):
    lines, truth = deepspeed_log(4000, 20, ceiling=300.0)
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    proc = run_cli(["--log", "train.log", "--json", "diag.json"], tmp_path, module="search.diagnose")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("Log train.log: DeepSpeed, ") and "4000 optimizer steps" in out[0]
    assert (
        f"skipped steps: {truth['skipped']} of 4000" in proc.stdout
        and "verdict: chronic-skipping" in proc.stdout
    )
    assert "a log cannot show an underflow" in proc.stdout
    data = json.loads((tmp_path / "diag.json").read_text())
    assert data["verdict"] == "chronic-skipping" and data["skipped_steps"] == truth["skipped"]
    assert data["hit_minimum"] is False and data["log"] == "train.log"


@pytest.mark.parametrize(
    "content, args, message",
    [
        (None, [], "--log missing.log: No such file or directory"),
        ("epoch 1 loss 2.3\n", [], "no loss-scaler line"),
        (
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0\n",
            [],
            "pass --steps N",
        ),
        (
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0\n",
            ["--steps", "0"],
            "--steps must be >= 1",
        ),
        ("epoch 1\n", ["--json", "no/such/dir/d.json"], "--json no/such/dir/d.json"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path, monkeypatch, capsys, content, args, message
):
    name = "missing.log" if content is None else "train.log"
    if content is not None:
        (tmp_path / name).write_text(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)  # In this process: tests/cli/test_cli.py checks a process's bad-input exit.
    assert diagnose_main(["--log", name, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("search.diagnose: error: ") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- shapes of real logs --------------------------------------------------------------------------------

_FP16_OPT = (  # DeepSpeed 0.19.8, outside ZeRO
    "[2026-12-06 04:00:00,000] [INFO] [fused_optimizer.py:{}:_update_scale] {}"
)


def fused_optimizer_log(cuts_then_growths: int, steps: int) -> list[str]:
    """DeepSpeed's FP16_Optimizer (runtime/fp16/fused_optimizer.py:413-423, verbose): from 2^16 down to 2^8,
    then ``cuts_then_growths`` times a growth to 2^9 and a cut back; the engine's step line every 100 steps.
    """
    lines, scale, step = [], 2.0**16, 0
    for _ in range(8):
        step += 1
        lines += [
            _FP16_OPT.format(413, f"\nGrad overflow on iteration {step}").split("\n")[-1],
            _FP16_OPT.format(414, f"Reducing dynamic loss scale from {scale} to {scale / 2}"),
        ]
        scale /= 2
    for _ in range(cuts_then_growths):
        lines += [
            _FP16_OPT.format(421, "No Grad overflow for 20 iterations"),
            _FP16_OPT.format(423, f"Increasing dynamic loss scale from {scale} to {scale * 2}"),
            _FP16_OPT.format(414, f"Reducing dynamic loss scale from {scale * 2} to {scale}"),
        ]
    lines.append(
        f"[2026-12-06 04:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] step={steps}, "
        f"skipped={8 + cuts_then_growths}, lr=[0.0001], mom=[(0.9, 0.999)]"
    )
    return lines


@pytest.mark.parametrize(
    "lines, steps, skipped, verdict",
    [
        # Outside ZeRO DeepSpeed logs its growth too: 8 cuts of the start, then 100 more in 1000 steps.
        (fused_optimizer_log(100, 1000), None, 108, "chronic-skipping"),
        (fused_optimizer_log(2, 1000), None, 10, "healthy"),
        # Older releases wrote one overflow twice ("Reducing ..." and "... fp16 dynamic loss scale
        # overflow!"): once.
        (
            [
                (
                    "[INFO] [unfused_optimizer.py:282:_update_scale] Reducing dynamic loss scale from 65536.0"
                    " to 32768.0"
                ),
                (
                    "[INFO] [unfused_optimizer.py:207:step] [deepspeed] fp16 dynamic loss scale overflow!"
                    " Skipping step. Attempted loss scale: 65536.0, reducing to 32768.0"
                ),
                "[INFO] [unfused_optimizer.py:281:_update_scale] Grad overflow on iteration: 0",
                "[Rank 0] step=500, skipped=1, lr=[0.0001], mom=[0.9]",
            ],
            None,
            1,
            "healthy",
        ),
        # Ranks other than 0 are not read; the engine's count (rank 0) is the truth.
        (
            [
                "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
                "[deepspeed] OVERFLOW! Rank 1 Skipping step. Attempted loss scale: 65536, reducing to 32768",
                "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384",
                "[deepspeed] OVERFLOW! Rank 1 Skipping step. Attempted loss scale: 32768, reducing to 16384",
                "[Rank 0] step=500, skipped=2, lr=[0.0001], mom=[0.9]",
            ],
            None,
            2,
            "healthy",
        ),
        # Skips the engine counted with no overflow line (a log without the scaler's messages): still judged.
        (
            [f"[Rank 0] step={s}, skipped={s // 2}, lr=[0.0001], mom=[0.9]" for s in range(10, 101, 10)],
            None,
            50,
            "chronic-skipping",
        ),
        # A sentence's full stop after the number; a tqdm bar's carriage returns on the same line.
        (
            [
                "epoch 1: 10%|#         | 3/30 [00:01<00:09]\rGradient overflow.  Skipping step, loss scaler"
                " 0 reducing loss scale to 32768.0."
            ],
            1000,
            1,
            "healthy",
        ),
        # fairseq's simple (non-json) progress format.
        (
            [
                (
                    "2026-12-06 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring"
                    " gradient, setting loss scale to: 64.0"
                ),
                (
                    "2026-12-06 | INFO | train_inner | epoch 001:    300 / 900 loss=3.1, num_updates=300,"
                    " lr=0.0001, loss_scale=64"
                ),
            ],
            None,
            1,
            "healthy",
        ),
    ],
)
def test_real_log_shapes(lines, steps, skipped, verdict):
    reading = read_log(lines, steps)
    assert (reading.skipped_steps, reading.verdict) == (skipped, verdict), reading.reason


def test_more_skips_than_steps_is_refused():
    with pytest.raises(LogError, match="more than the 1 steps"):
        read_log(
            ["Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"] * 2, steps=1
        )


def test_a_file_and_standard_input_number_lines_alike_and_an_infinite_scale_is_written(tmp_path, monkeypatch):
    """Lines end at "\\n" only (a progress bar's "\\r" does not start one), as grep -n counts them."""
    text = (
        "bar 1/3\rbar 2/3\rbar 3/3\n"
        + "\n".join(
            f"NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: {s}"
            for s in ("inf", "64.0", "128.0")
        )
        + '\n{"num_updates": "400", "loss_scale": "128"}\n'
    )
    (tmp_path / "fs.log").write_text(text)
    from_file = run_cli(["--log", "fs.log", "--json", "a.json"], tmp_path, module="search.diagnose")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    from_stdin = run_cli(["--log", "-", "--json", "b.json"], tmp_path, module="search.diagnose")
    assert from_file.returncode == from_stdin.returncode == 0, from_file.stderr + from_stdin.stderr
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a["scale_trace"] == b["scale_trace"] and a["scale_trace"][0] == {
        "line": 2,
        "step": None,
        "scale": "inf",
    }
    assert a["settled_line"] == 4 and a["skipped_steps"] == 3

"""The loss-scaler lines of DeepSpeed, apex and fairseq training logs, each read into one :class:`LogLine`.

Each pattern is the message as the framework writes it (a timestamp or logger prefix before it is allowed):

* **DeepSpeed** 0.19.8, ``deepspeed/runtime/fp16/loss_scaler.py``, ``DynamicLossScaler.update_scale``:
  ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: S, reducing to S/2``; with hysteresis
  left, ``... Attempted loss scale: S, but hysteresis is H. Reducing hysteresis to H-1`` (the step is skipped,
  the scale kept); at the minimum it raises ``Current loss scale already at minimum - cannot decrease scale
  anymore. Exiting run.``; ``deepspeed/runtime/engine.py`` logs ``step=N, skipped=K, lr=..., mom=...``.
  Growth is not logged: a grown scale shows as the next overflow's attempted scale.
* **apex** ``apex/amp/handle.py`` (commit 007c59472a94c69683b9315ee6844bcde1b15997), ``scale_loss``:
  ``Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to S`` (S: the scale after the
  halving). It logs no step numbers.
* **fairseq** ``fairseq/trainer.py`` and ``fairseq/optim/dynamic_loss_scaler.py`` (commit
  0d77035ea39e28f30eb20030547fecaee39ff25d): ``NOTE: gradient overflow detected, ignoring gradient, setting
  loss scale to: S``; at the minimum ``Minimum loss scale reached (M). Your loss is probably exploding...``
  (FloatingPointError: the run ends); its progress lines carry ``"num_updates": "N"`` and
  ``"loss_scale": "S"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OVERFLOW = "overflow"  # a skipped step whose scale was cut
HYSTERESIS = "hysteresis"  # a skipped step whose scale was kept (DeepSpeed's hysteresis spent)
GROWTH = "growth"  # the scale grew (only DeepSpeed's fp16 optimizers outside ZeRO say so)
MINIMUM = "minimum"  # the framework's minimum scale was reached: it ended the run
PROGRESS = "progress"  # a step count (and maybe the scale) without an overflow

# A number as Python prints a float or an int; never the full stop that may end a sentence after it.
_NUMBER = r"(inf|[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
_PATTERNS: list[tuple[str, str, re.Pattern[str]]] = [
    # ZeRO's DynamicLossScaler (0.19.8); "[deepscale]" in the oldest releases. Rank 0 only, as DeepSpeed
    # logs it.
    ("deepspeed", OVERFLOW, re.compile(
        rf"\[(?:deepspeed|deepscale)\] OVERFLOW! Rank 0 Skipping step\. Attempted loss scale: {_NUMBER}, "
        rf"reducing to {_NUMBER}")),
    ("deepspeed", HYSTERESIS, re.compile(
        rf"\[(?:deepspeed|deepscale)\] OVERFLOW! Rank 0 Skipping step\. Attempted loss scale: {_NUMBER}, "
        r"but hysteresis is (\d+)")),
    # The fp16 optimizers outside ZeRO (runtime/fp16/fused_optimizer.py, unfused_optimizer.py, with verbose),
    # and older releases' ZeRO: one overflow may write both lines (merged into one skip).
    ("deepspeed", OVERFLOW, re.compile(rf"Reducing dynamic loss scale from {_NUMBER} to {_NUMBER}")),
    ("deepspeed", OVERFLOW, re.compile(
        rf"\[deepspeed\] fp16 dynamic loss scale overflow! Skipping step\. Attempted loss scale: {_NUMBER}, "
        rf"reducing to {_NUMBER}")),
    ("deepspeed", GROWTH, re.compile(rf"Increasing dynamic loss scale from {_NUMBER} to {_NUMBER}")),
    ("deepspeed", MINIMUM, re.compile(
        r"Current loss scale already at minimum - cannot decrease scale anymore")),
    ("deepspeed", PROGRESS, re.compile(r"\bstep=(\d+), skipped=(\d+),")),
    ("apex", OVERFLOW, re.compile(
        rf"Gradient overflow\.  Skipping step, loss scaler 0 reducing loss scale to {_NUMBER}")),
    ("fairseq", OVERFLOW, re.compile(
        rf"gradient overflow detected, ignoring gradient, setting loss scale to: {_NUMBER}")),
    ("fairseq", MINIMUM, re.compile(rf"Minimum loss scale reached \({_NUMBER}\)")),
    # Its progress lines: --log-format json ("num_updates": "300") or simple/tqdm (num_updates=300).
    ("fairseq", PROGRESS, re.compile(r'"num_updates": "(\d+)"|\bnum_updates=(\d+)')),
]  # fmt: skip
_FAIRSEQ_SCALE = re.compile(rf'"loss_scale": "{_NUMBER}"|\bloss_scale={_NUMBER}')


@dataclass(frozen=True)
class LogLine:
    """One loss-scaler line of a log.

    Attributes:
        number: Its line number in the file (1-based).
        framework: ``deepspeed``, ``apex`` or ``fairseq``.
        kind: :data:`OVERFLOW`, :data:`HYSTERESIS`, :data:`MINIMUM` or :data:`PROGRESS`.
        scale_before: The scale the skipped step was attempted at, where the line says (DeepSpeed).
        scale_after: The scale from the next step on, where the line says.
        step: The optimizer step the line reports (progress lines), or None.
        skipped: The skipped steps so far, where the line says (DeepSpeed's progress lines).
        pattern: Which of the known messages it is (two messages of one overflow are one skip).
    """

    number: int
    framework: str
    kind: str
    scale_before: float | None = None
    scale_after: float | None = None
    step: int | None = None
    skipped: int | None = None
    pattern: int = 0


def read_line(number: int, text: str) -> LogLine | None:
    """The loss-scaler line ``text`` (line ``number`` of a log), or None when it is none of the known ones."""
    for index, (framework, kind, pattern) in enumerate(_PATTERNS):
        match = pattern.search(text)
        if match is None:
            continue
        groups = [g for g in match.groups() if g is not None]
        if (
            kind in (OVERFLOW, GROWTH) and len(groups) == 2
        ):  # DeepSpeed: the scale attempted, and the next one.
            return LogLine(number, framework, kind, float(groups[0]), float(groups[1]), pattern=index)
        if kind == HYSTERESIS:
            return LogLine(number, framework, kind, float(groups[0]), float(groups[0]), pattern=index)
        if framework == "deepspeed" and kind == PROGRESS:
            return LogLine(
                number, framework, kind, step=int(groups[0]), skipped=int(groups[1]), pattern=index
            )
        if kind == OVERFLOW:  # apex and fairseq write the scale after the cut
            return LogLine(number, framework, kind, scale_after=float(groups[0]), pattern=index)
        if framework == "fairseq" and kind == PROGRESS:
            scale = _FAIRSEQ_SCALE.search(text)
            value = next((g for g in scale.groups() if g is not None), None) if scale else None
            return LogLine(
                number,
                framework,
                kind,
                scale_after=None if value is None else float(value),
                step=int(groups[0]),
                pattern=index,
            )
        return LogLine(number, framework, kind, pattern=index)
    return None

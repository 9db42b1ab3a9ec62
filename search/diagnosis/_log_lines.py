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
MINIMUM = "minimum"  # the framework's minimum scale was reached: it ended the run
PROGRESS = "progress"  # a step count (and maybe the scale) without an overflow

_NUMBER = r"([0-9.]+(?:[eE][-+]?[0-9]+)?|inf)"
_PATTERNS: list[tuple[str, str, re.Pattern[str]]] = [
    ("deepspeed", OVERFLOW, re.compile(
        rf"\[deepspeed\] OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: {_NUMBER}, reducing to {_NUMBER}")),
    ("deepspeed", HYSTERESIS, re.compile(
        rf"\[deepspeed\] OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: {_NUMBER}, but hysteresis is (\d+)")),
    ("deepspeed", MINIMUM, re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore")),
    ("deepspeed", PROGRESS, re.compile(r"\bstep=(\d+), skipped=(\d+),")),
    ("apex", OVERFLOW, re.compile(rf"Gradient overflow\.  Skipping step, loss scaler \d+ reducing loss scale to {_NUMBER}")),
    ("fairseq", OVERFLOW, re.compile(rf"gradient overflow detected, ignoring gradient, setting loss scale to: {_NUMBER}")),
    ("fairseq", MINIMUM, re.compile(rf"Minimum loss scale reached \({_NUMBER}\)")),
    ("fairseq", PROGRESS, re.compile(r'"num_updates": "(\d+)"')),
]  # fmt: skip
_FAIRSEQ_SCALE = re.compile(rf'"loss_scale": "{_NUMBER}"')


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
    """

    number: int
    framework: str
    kind: str
    scale_before: float | None = None
    scale_after: float | None = None
    step: int | None = None
    skipped: int | None = None


def read_line(number: int, text: str) -> LogLine | None:
    """The loss-scaler line ``text`` (line ``number`` of a log), or None when it is none of the known ones."""
    for framework, kind, pattern in _PATTERNS:
        match = pattern.search(text)
        if match is None:
            continue
        groups = match.groups()
        if framework == "deepspeed" and kind == OVERFLOW:
            return LogLine(number, framework, kind, float(groups[0]), float(groups[1]))
        if framework == "deepspeed" and kind == HYSTERESIS:
            return LogLine(number, framework, kind, float(groups[0]), float(groups[0]))
        if framework == "deepspeed" and kind == PROGRESS:
            return LogLine(number, framework, kind, step=int(groups[0]), skipped=int(groups[1]))
        if kind == OVERFLOW:  # apex and fairseq write the scale after the cut
            return LogLine(number, framework, kind, scale_after=float(groups[0]))
        if framework == "fairseq" and kind == PROGRESS:
            scale = _FAIRSEQ_SCALE.search(text)
            return LogLine(number, framework, kind, scale_after=float(scale.group(1)) if scale else None, step=int(groups[0]))
        return LogLine(number, framework, kind)
    return None

"""The loss-scale rules a study searches: PyTorch's GradScaler and DeepSpeed's, Megatron-LM's and fairseq's
own.

* ``_knob``: one setting of a rule: its own name, default, search range and what it accepts;
* ``_rule``: a rule as the service uses it (:class:`ScalerRule`), how its scale cycles (:class:`Cycle`) and
  one trial's setting of a framework's rule (:class:`RuleSetting`);
* ``_gradscaler``: GradScaler's rule, its four settings (:class:`ScalerConfig`), PyTorch's defaults and its
  arithmetic in plain Python (:class:`GradScalerScale`);
* ``_deepspeed``, ``_megatron``, ``_fairseq``: each framework's rule step for step, its knobs, its
  baselines and its config form, with the source it was read from;
* ``_saved``: how a framework saves its scaler in a checkpoint (:class:`SavedState`), for a run that goes on
  from it;
* ``_catalogue``: the ``--scaler`` choices, and which rule a saved scaler is of (:func:`saved_rule`).

Everything above this package asks the rule (``RULES[name]``) rather than testing which one it is.
Pure Python: imports neither torch, optuna nor numpy, so every layer and every command's start-up can read it.
"""

from search.scalers._catalogue import FRAMEWORKS, RULES, SCALERS, saved_rule
from search.scalers._deepspeed import DEEPSPEED, DeepSpeedScale, ScaleAtMinimum
from search.scalers._fairseq import FAIRSEQ, FairseqScale
from search.scalers._gradscaler import (
    GRADSCALER,
    GRADSCALER_KEYS,
    PARAM_NAMES,
    TORCH,
    GradScalerScale,
    ScalerConfig,
)
from search.scalers._knob import BOOL, FLOAT, INT, Knob, format_scale, shortest
from search.scalers._megatron import MEGATRON, MegatronScale
from search.scalers._rule import Cycle, RuleSetting, ScalerRule, ScaleRule
from search.scalers._saved import SavedState, as_mapping

__all__ = [
    "BOOL",
    "DEEPSPEED",
    "FAIRSEQ",
    "FLOAT",
    "FRAMEWORKS",
    "GRADSCALER",
    "GRADSCALER_KEYS",
    "INT",
    "MEGATRON",
    "PARAM_NAMES",
    "RULES",
    "SCALERS",
    "TORCH",
    "Cycle",
    "DeepSpeedScale",
    "FairseqScale",
    "GradScalerScale",
    "Knob",
    "format_scale",
    "MegatronScale",
    "RuleSetting",
    "SavedState",
    "ScaleAtMinimum",
    "ScaleRule",
    "ScalerConfig",
    "ScalerRule",
    "as_mapping",
    "saved_rule",
    "shortest",
]

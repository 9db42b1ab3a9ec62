"""The loss-scale rules a study searches: PyTorch's GradScaler and DeepSpeed's, Megatron-LM's and fairseq's own.

* ``_knob``: one setting of a framework's scaler: its own name, default, search range and rule;
* ``_rule``: a framework's rule as the service uses it (:class:`FrameworkRule`) and one trial's setting
  (:class:`RuleSetting`);
* ``_deepspeed``, ``_megatron``, ``_fairseq``: each framework's rule step for step, its knobs, its
  baselines and its config form, with the source it was read from;
* ``_catalogue``: the ``--scaler`` choices.

Pure Python (numpy for Megatron's float32): imports neither torch nor optuna, so every layer can read it.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_knob": ("BOOL", "FLOAT", "INT", "Knob", "shortest"),
        "_rule": ("FrameworkRule", "RuleSetting", "ScaleRule"),
        "_deepspeed": ("DEEPSPEED", "DeepSpeedScale", "ScaleAtMinimum"),
        "_megatron": ("MEGATRON", "MegatronScale"),
        "_fairseq": ("FAIRSEQ", "FairseqScale"),
        "_catalogue": ("RULES", "SCALERS", "TORCH"),
    },
)

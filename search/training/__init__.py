"""One training run, and its judgement: the AMP loop, the evaluation, the penalty, populations.

* ``_trainer``: the AMP training loop (autocast + GradScaler, or a framework's rule from
  :mod:`search.scalers` moving the scale) -> :class:`TrainResult`;
* ``_feed``: what the loop feeds on: a tensor task's index plan or a loader task's batches, each step's seed;
* ``_evaluation``: the evaluation every trial is judged on (final weights on the evaluation set);
* ``_penalty``: a run -> its objective value and failure code;
* ``_population_check``: what population mode can train (:class:`PopulationError`), the problem read into a
  plan;
* ``_population_model``: K copies of the model as stacked weights: forward, loss and backward by hand;
* ``_population_scaler``: GradScaler per member: found_inf, unscale, the scale's update;
* ``_population_optimizer``: the stacked weights' optimizer state, stepped only where a member's step is
  taken;
* ``_population``: the population loop: K settings trained at once -> one :class:`TrainResult` each;
* ``_objective``: one trial (or a population's K): train, judge, build the record's attrs.

Knows nothing of Optuna or storage (``tests/test_layering.py``), so every number can be checked
against a plain PyTorch loop alone.
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face

if TYPE_CHECKING:  # Loaded on first use: every module here imports torch.
    from search.training._evaluation import (
        FINAL_WEIGHTS,
        LAST_STEP,
        Evaluation,
        evaluate,
        evaluation_mode,
        evaluation_of,
        evaluation_values,
        initial_evaluation,
    )
    from search.training._feed import batch_plan
    from search.training._objective import (
        TrialOutcome,
        outcome_of,
        pruning_checkpoints,
        run_population,
        run_trial,
    )
    from search.training._penalty import Assessment, assess
    from search.training._population import train_population
    from search.training._population_check import PopulationError, check_population
    from search.training._trainer import (
        StepObserver,
        TrainResult,
        TrialTimeout,
        fp32_zero_fraction,
        run_steps,
        skips_over,
        train,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "Assessment",
    "Evaluation",
    "FINAL_WEIGHTS",
    "LAST_STEP",
    "PopulationError",
    "StepObserver",
    "TrainResult",
    "TrialOutcome",
    "TrialTimeout",
    "assess",
    "batch_plan",
    "check_population",
    "evaluate",
    "evaluation_mode",
    "evaluation_of",
    "evaluation_values",
    "fp32_zero_fraction",
    "initial_evaluation",
    "outcome_of",
    "pruning_checkpoints",
    "run_population",
    "run_steps",
    "run_trial",
    "skips_over",
    "train",
    "train_population",
]

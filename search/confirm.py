"""``python -m search.confirm``: is the best setting of a finished search really better than the default?

A search ranks settings on one seed: one data set and one set of initial weights. The winner may
simply be lucky on that seed. This command re-runs the top-k configurations of a finished study
(its k lowest-objective COMPLETE trials, de-duplicated by params, baselines included) and PyTorch's
default GradScaler settings (the ``seed-1`` baseline, in the study's space: a fixed parameter keeps
its fixed value) on K new seeds: seed ``s`` in ``study_seed + 1 ... study_seed + K`` builds the
study's task with new data and new initial weights. Every configuration is trained on every seed
with the study's recorded epochs, autocast dtype and penalty, through
:func:`search.training._objective.run_trial`, so each value is the search's own objective. All
configurations on one seed share that seed's data and weights (common random numbers), so the
comparison with the default is paired by seed: a two-sided paired t-test (``scipy.stats.ttest_rel``,
alpha 0.05), so a default that is significantly better is said so too. Besides the top-k, the
search's recommendation (:func:`search.results._analysis.recommend`) is run when it is not the default
itself; ``search.report`` then lets these runs decide the recommendation.

The runs are stored apart from the search, in a sibling study ``<study>.confirm`` of the same
storage (direction minimize), so the search's sampler and best value never see them: one COMPLETE
trial per (configuration, seed) with the configuration's params and distributions, the objective
as value, user attrs ``config`` (e.g. ``best-1 (#78)``, ``seed-1 (default)``), ``source_trial``,
``data_seed`` and everything :func:`run_trial` records, and the loss curve as intermediate values.
The sibling's user attrs record ``source_study``, ``seeds``, ``top``, ``epochs``, ``device`` (the
device kind of its runs) and ``configs``; ``seeds`` and ``configs`` are those of the latest
confirmation, which is what :func:`summarize_confirmation` reports. A (configuration, seed) pair
already stored is never run again, so an interrupted confirmation resumes and a larger
``--top``/``--seeds`` adds only what is missing; each run is written finished, with its curve, in
one transaction (:class:`search.storage._trial_writer.TrialWriter`), so nothing is ever left RUNNING.

Then the corners of the ranges that may be safe together (:func:`search.results._analysis.check_boxes`)
are trained on the search's own data, box by box until one has no failing corner, and stored in
the same sibling study with user attrs ``check`` = ``"corner"`` and ``point`` (``--no-corners``
skips them).

Exit codes: 0 done, 1 a storage or training failure during the runs, 2 bad input (one line on
stderr, nothing written), 130/143 interrupted by SIGINT/SIGTERM (finished runs are kept).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.exc
import sqlalchemy.pool
import torch
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm

from search.cli import (
    OneLineParser,
    Session,
    check_output,
    fail,
    percent,
    prog_name,
    run_command,
    stdout_reader_gone,
)
from search.core import (
    CHECK,
    CONFIG,
    CORNER,
    DATA_SEED,
    DEFAULT_BASELINE,
    FAILURE,
    NONFINITE,
    POINT,
    POW2_NAME,
    SEED_BASELINES,
    SOURCE_TRIAL,
    Interrupted,
    ScalerConfig,
    Settings,
    UsageError,
    baseline_of,
    device_label,
    distributions,
    interrupts_as_exceptions,
    raise_pending,
    resolve_device,
    scaler_config,
)
from search.results import (
    ALPHA,
    DEFAULT_LABEL,
    SUFFIX,
    collect_runs,
    confirm_study_name,
    confirmation_data,
    confirmation_seeds,
    format_confirmation,
    paired_test,
    summarize_confirmation,
)
from search.results import _analysis as analysis
from search.results import config_key as _config_key
from search.storage import (
    StorageError,
    TrialWriter,
    choose_study,
    close_storage,
    first_line,
    mask_url,
    open_existing_storage,
    redact,
)
from search.study import settings_of
from search.tasks import Problem, TaskError, build_problem, resolve_task
from search.training import TrialOutcome, run_trial

__all__ = [
    "ALPHA",
    "DEFAULT_LABEL",
    "SUFFIX",
    "Candidate",
    "ConfirmError",
    "build_parser",
    "confirm_study_name",
    "confirmation_seeds",
    "default_candidate",
    "format_confirmation",
    "main",
    "paired_test",
    "select_candidates",
    "summarize_confirmation",
]

PROG = "search.confirm"


class ConfirmError(UsageError):
    """Bad input: nothing was written. The message is one line."""


@dataclass(frozen=True)
class Candidate:
    """One configuration to confirm.

    Attributes:
        label: ``best-<rank> (#<trial>)`` or :data:`DEFAULT_LABEL`.
        source_trial: The search trial it comes from; None for the default.
        params: Trial params in the study's space (fixed parameters are not params).
        distributions: The distributions its trials are stored with.
        baseline: The source trial's baseline tag (``seed-1`` ...), if it is one.
    """

    label: str
    source_trial: int | None
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution] = field(repr=False)
    baseline: str | None = None

    @property
    def key(self) -> str:
        """What identifies its runs in the sibling study, with the data seed."""
        return _config_key(self.source_trial, self.params)


def select_candidates(
    trials: Sequence[FrozenTrial], settings: Settings, top: int, tolerance: float = analysis.DEFAULT_TOLERANCE
) -> tuple[list[Candidate], list[str]]:
    """The top-``top`` configurations of a study and the default, with notes for the user.

    The top-k are the lowest-objective COMPLETE trials (ties: the earlier trial first), one per
    distinct params; baselines are not excluded, so ``best-1`` may be a seed baseline, even the
    default's own settings.
    """
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    ranked = sorted(complete, key=lambda t: (t.value, t.number))
    chosen: list[Candidate] = []
    seen: set[str] = set()
    for trial in ranked:
        key = _config_key(None, trial.params)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(
            Candidate(
                label=f"best-{len(chosen) + 1} (#{trial.number})",
                source_trial=trial.number,
                params=dict(trial.params),
                distributions=dict(trial.distributions),
                baseline=baseline_of(trial),
            )
        )
        if len(chosen) == top:
            break
    notes = []
    if len(chosen) < top:
        notes.append(f"only {len(chosen)} distinct complete configuration(s) in the study; --top {top} asked")
    recommended = recommended_candidate(trials, settings, tolerance)
    if recommended is not None and all(
        _config_key(None, recommended.params) != _config_key(None, c.params) for c in chosen
    ):
        chosen.append(recommended)
    default, note = default_candidate(settings)
    if note:
        notes.append(note)
    return chosen + [default], notes


def recommended_candidate(
    trials: Sequence[FrozenTrial], settings: Settings, tolerance: float = analysis.DEFAULT_TOLERANCE
) -> Candidate | None:
    """The search's recommendation (:func:`search.results._analysis.recommend`) as a candidate, unless it is the default."""
    rec = analysis.recommend(trials, settings.space, tolerance)
    if rec is None or rec.keep_default:
        return None
    params: dict[str, Any] = {}
    for name, dist in distributions(settings.space).items():
        value: Any = math.log2(rec.config.init_scale) if name == POW2_NAME else getattr(rec.config, name)
        params[name] = int(round(value)) if isinstance(dist, IntDistribution) else float(value)
    return Candidate(
        f"recommended (#{rec.source_trial})",
        rec.source_trial,
        params,
        dict(distributions(settings.space)),
    )


def default_candidate(settings: Settings) -> tuple[Candidate, str | None]:
    """PyTorch's default settings (the ``seed-1`` baseline) as params of the study's space.

    A parameter the space fixes keeps its fixed value (it is not a param). A default value outside
    a searched range is still run; its stored distribution is widened to contain it, with a note.
    """
    _tag, cfg = SEED_BASELINES[0]
    params: dict[str, Any] = {}
    dists: dict[str, BaseDistribution] = {}
    outside = []
    for name, dist in distributions(settings.space).items():
        value: Any = math.log2(cfg.init_scale) if name == POW2_NAME else getattr(cfg, name)
        if isinstance(dist, IntDistribution):
            value = int(value)
        params[name] = value
        if not dist.low <= value <= dist.high:
            outside.append(name)
            low, high = min(dist.low, value), max(dist.high, value)
            if isinstance(dist, IntDistribution):
                dist = IntDistribution(int(low), int(high), log=dist.log, step=dist.step)
            else:
                assert isinstance(dist, FloatDistribution)
                dist = FloatDistribution(low, high, log=dist.log, step=dist.step)
        dists[name] = dist
    note = None
    if outside:
        note = (
            f"the default's {', '.join(outside)} lies outside the study's search space; "
            "it is run all the same"
        )
    return Candidate(DEFAULT_LABEL, None, params, dists, DEFAULT_BASELINE), note


# -- the command --------------------------------------------------------------------------------


def _point_distributions(values: dict[str, float], settings: Settings) -> dict[str, BaseDistribution]:
    """One-point distributions for a corner run, with the search's kinds and log flags: Optuna refuses
    to hold (and optuna.copy_study to copy) a parameter whose log flag differs between trials."""
    searched = distributions(settings.space)
    out: dict[str, BaseDistribution] = {}
    for name, v in values.items():
        log = getattr(searched.get(name), "log", False)
        out[name] = IntDistribution(int(v), int(v), log=log) if name == "growth_interval" else FloatDistribution(v, v, log=log)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.confirm"),
        description="Re-run the top configurations of a finished search and PyTorch's default "
        "GradScaler settings on new data/initialisation seeds, stored in the sibling study "
        "<study>.confirm, and test whether the best beats the default beyond seed noise.",
        allow_abbrev=False,
    )
    add = p.add_argument
    add("--storage", metavar="URL", default="sqlite:///study.db", help="Optuna storage URL [sqlite:///study.db]")
    add("--study-name", default=None, help="the search study [the storage's only search study]")
    add("--top", type=int, default=3, metavar="K", help="confirm the K best distinct configurations [3]")
    add(
        "--seeds",
        type=int,
        default=5,
        metavar="K",
        help="data/initialisation seeds: study seed + 1 ... + K (K >= 2) [5]",
    )
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N; auto = cuda if available [auto]")
    add(
        "--tolerance",
        type=percent,
        default=analysis.DEFAULT_TOLERANCE * 100,
        metavar="PCT",
        help="good: objective within PCT%% of the best, as search.report's --tolerance; picks the "
        "recommendation to confirm and the ranges to check [1]",
    )
    add(
        "--no-corners",
        action="store_true",
        help="do not train the corners of the ranges that may be safe together (up to 16 runs a box, "
        "on the search's own data)",
    )
    add("--json", metavar="PATH", default=None, help="write the confirmation's numbers as JSON")
    add("--quiet", action="store_true", help="no progress bar")
    return p


@dataclass
class _Plan:
    """Everything validated before anything is written."""

    storage: optuna.storages.RDBStorage
    study_name: str
    n_complete: int
    settings: Settings
    seeds: list[int]
    candidates: list[Candidate]
    notes: list[str]
    device: torch.device
    pending: dict[int, list[Candidate]]  # seed -> configurations not run on it yet
    first_problem: Problem | None
    baselines: dict[int, str]
    trials: list[FrozenTrial] = field(default_factory=list)


def _plan(args: argparse.Namespace) -> _Plan:
    if args.top < 1:
        raise ConfirmError(f"--top must be >= 1, got {args.top}")
    if args.seeds < 2:
        raise ConfirmError(f"--seeds must be >= 2 (a paired test needs two seeds), got {args.seeds}")
    try:
        device = resolve_device(args.device)
    except RuntimeError as e:  # torch.device("tpu")
        raise ConfirmError(f"unknown device {args.device!r}: {first_line(e)}")
    except ValueError as e:  # search.optimize.UsageError: CUDA absent, index out of range.
        raise ConfirmError(str(e))
    if args.json:
        check_output("--json", args.json)

    url = args.storage
    try:
        storage = open_existing_storage(url, immediate=True)  # It writes the sibling study.
    except StorageError as e:
        raise ConfirmError(str(e))
    _OPENED.append(storage)

    name = choose_study(storage, url, args.study_name)
    study = optuna.load_study(storage=storage, study_name=name)
    if "task" not in study.user_attrs:
        raise ConfirmError(f"study {name!r} was not created by search.optimize (it records no task)")
    settings = settings_of(study)
    trials = study.get_trials(deepcopy=False)
    n_complete = sum(t.state == TrialState.COMPLETE for t in trials)
    if n_complete == 0:
        raise ConfirmError(f"study {name!r} has no COMPLETE trials to confirm")
    candidates, notes = select_candidates(trials, settings, args.top, args.tolerance / 100)
    baselines = {
        t.number: tag for t in trials if (tag := baseline_of(t)) is not None
    }
    seeds = confirmation_seeds(settings.run.seed, args.seeds)

    sibling_name = confirm_study_name(name)
    done: set[tuple[str, int]] = set()
    try:
        sibling_id = storage.get_study_id_from_name(sibling_name)
    except KeyError:
        sibling_id = None
    if sibling_id is not None:
        attrs = storage.get_study_user_attrs(sibling_id)
        if attrs.get("source_study") != name:
            raise ConfirmError(
                f"study {sibling_name!r} exists but was not created by search.confirm for {name!r}"
            )
        if attrs.get("epochs") != settings.run.epochs:
            raise ConfirmError(
                f"the runs in {sibling_name!r} used {attrs.get('epochs')} epochs, the study now records "
                f"{settings.run.epochs}; delete {sibling_name!r} to confirm again"
            )
        for t in storage.get_all_trials(sibling_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            seed = t.user_attrs.get(DATA_SEED)
            if seed is not None:
                done.add((_config_key(t.user_attrs.get(SOURCE_TRIAL), t.params), int(seed)))
        kind = attrs.get("device")
        pending_any = any((c.key, s) not in done for s in seeds for c in candidates)
        if pending_any and kind is not None and kind != device.type:
            raise ConfirmError(
                f"the runs in {sibling_name!r} were made on {kind}; this run would use {device.type}, "
                f"and one comparison must not mix devices (pass --device {kind})"
            )
    pending = {s: [c for c in candidates if (c.key, s) not in done] for s in seeds}
    pending = {s: cs for s, cs in pending.items() if cs}

    first_problem = None
    if pending:
        try:
            task = resolve_task(settings.run.task)
            first_problem = build_problem(task, settings.run.task, next(iter(pending)))
        except TaskError as e:
            raise ConfirmError(str(e))
    return _Plan(
        storage, name, n_complete, settings, seeds, candidates, notes, device, pending, first_problem,
        baselines, list(trials),
    )


def _fail(message: str, code: int = 2) -> int:
    return fail(PROG, message, code)


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


_OPENED: list[optuna.storages.RDBStorage] = []


def _close_all_storages() -> None:
    for storage in _OPENED:
        close_storage(storage)
    _OPENED.clear()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (141: standard output closed by its reader)."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    session.on_close(_close_all_storages)
    args = build_parser().parse_args(argv)
    url = args.storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        plan = _plan(args)
    except UsageError as e:  # ConfirmError, and choose_study's errors.
        return _fail(redact(str(e), url))
    except Exception as e:  # An unexpected failure while reading the study is still bad input.
        return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
    try:
        code = _run(plan, args)
        if code == 0:
            raise_pending()  # Recorded outside the training (search.cli._startup): not a success.
        return code
    except Interrupted as e:
        _note(f"interrupted by {e}; finished runs are stored, run the same command again to resume")
        return 128 + e.signum
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
        if isinstance(e, BrokenPipeError) and stdout_reader_gone():
            raise  # Not a storage failure: the command's reader went away (run_command exits 141).
        return _fail(f"storage {mask_url(url)} failed: {redact(first_line(e), url)}", 1)
    except TaskError as e:
        return _fail(redact(str(e), url), 1)
    except Exception as e:  # Training failed (CUDA out of memory, a user loss that raises).
        return _fail(f"a confirmation run failed: {type(e).__name__}: {redact(first_line(e), url)}", 1)

def _run(plan: _Plan, args: argparse.Namespace) -> int:
    settings, storage = plan.settings, plan.storage
    url = args.storage
    for note in plan.notes:
        _note(f"note: {note}")
    sibling = _open_sibling(plan, args)
    writer = TrialWriter(sibling)  # A run with its curve in one transaction, not one per step.
    label = device_label(plan.device)
    amp_dtype = getattr(torch, settings.run.amp_dtype)
    n_runs = sum(len(cs) for cs in plan.pending.values())
    bar = tqdm(
        total=n_runs,
        desc=sibling.study_name,
        unit="run",
        disable=args.quiet or n_runs == 0,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    start = time.perf_counter()
    done = 0
    # Every signal raises; the trial loop lets only the first one through, to protect the write of
    # the trial it interrupted. Here there is no such write: each run is written finished, in one
    # transaction, after it has trained.
    with interrupts_as_exceptions(first_only=False):
        try:
            task = resolve_task(settings.run.task) if plan.pending else None
            for i, (seed, candidates) in enumerate(plan.pending.items()):
                problem = plan.first_problem if i == 0 else None  # Built while validating the input.
                if problem is None:
                    assert task is not None
                    problem = build_problem(task, settings.run.task, seed)
                # Every configuration on this seed: same data, same weights.
                on_device = problem.to(plan.device)
                for candidate in candidates:
                    bar.set_postfix_str(f"{candidate.label}, seed {seed}", refresh=True)
                    outcome = _run_trial(
                        on_device,
                        scaler_config(candidate.params, settings.space),
                        epochs=settings.run.epochs,
                        steps=settings.run.steps or None,  # The search's own step count.
                        amp_dtype=amp_dtype,
                        penalty=settings.penalty,
                        device_label=label,
                    )
                    attrs = {
                        CONFIG: candidate.label,
                        SOURCE_TRIAL: candidate.source_trial,
                        DATA_SEED: seed,
                        **outcome.user_attrs,
                    }
                    writer.add(
                        optuna.trial.create_trial(
                            state=TrialState.COMPLETE,
                            value=outcome.value,
                            params=candidate.params,
                            distributions=candidate.distributions,
                            user_attrs=attrs,
                            intermediate_values=outcome.intermediate_values,
                        )
                    )
                    done += 1
                    bar.update(1)
            if not args.no_corners:
                done += _check_corners(plan, writer, label, amp_dtype, args)
        finally:
            bar.close()
    seconds = time.perf_counter() - start

    collected = collect_runs(storage, plan.study_name)
    assert collected is not None
    seeds, stats, corners = collected
    print(
        f"Confirmation of study {plan.study_name!r} ({plan.n_complete} complete trials) in {mask_url(url)}"
    )
    print(
        f"  {len(plan.candidates)} configs x {len(seeds)} seeds (data seeds {seeds[0]}..{seeds[-1]}: "
        f"new data and initial weights each), "
        + (f"{settings.run.steps} optimizer steps" if settings.run.steps else f"{settings.run.epochs} epochs")
        + f", {settings.run.amp_dtype} "
        f"on {plan.device.type}"
    )
    stored = len(plan.candidates) * len(seeds)
    if done:
        print(f"  this run: {done} runs in {seconds:.1f} s; stored in study {sibling.study_name!r}")
    else:
        print(f"  this run: nothing to run, all {stored} runs are already in study {sibling.study_name!r}")
    print()
    print(format_confirmation(seeds, stats, settings, plan.baselines))
    data = confirmation_data(seeds, stats, corners)
    rec = analysis.recommend(plan.trials, settings.space, args.tolerance / 100, confirmation=data)
    if rec is not None and rec.together_check != "none":
        print()
        print("  " + _together_sentence(rec))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write("\n")
    return 0


def _together_sentence(rec: analysis.Recommendation) -> str:
    """The recommendation's sentence on the ranges that are safe together."""
    return next(r for r in rec.reasons if "safe together" in r)


def _check_corners(
    plan: _Plan, writer: TrialWriter, label: str, amp_dtype: torch.dtype, args: argparse.Namespace
) -> int:
    """Trains the corners of :func:`search.results._analysis.check_boxes` on the search's own data, box by box,
    until a box has no failing corner; returns the number of runs made. Runs already stored are reused."""
    settings = plan.settings
    collected = collect_runs(plan.storage, plan.study_name)
    assert collected is not None
    seeds, stats, corners = collected
    rec = analysis.recommend(
        plan.trials, settings.space, args.tolerance / 100, confirmation=confirmation_data(seeds, stats, corners)
    )
    if rec is None or not rec.candidate:
        return 0
    problem: Problem | None = None
    made = 0
    for box in analysis.check_boxes(rec.candidate, rec.config):
        points = analysis.box_corners(box, rec.config)
        missing = [p for p in points if not any(_same(c["point"], p) for c in corners)]
        if missing and problem is None:
            task = resolve_task(settings.run.task)
            problem = build_problem(task, settings.run.task, settings.run.seed).to(plan.device)
        for point in tqdm(missing, desc="corners", unit="run", disable=args.quiet, file=sys.stderr, leave=False):
            cfg = ScalerConfig(point["init_scale"], point["growth_factor"], point["backoff_factor"], round(point["growth_interval"]))
            assert problem is not None
            outcome = _run_trial(
                problem, cfg, epochs=settings.run.epochs, steps=settings.run.steps or None, amp_dtype=amp_dtype,
                penalty=settings.penalty, device_label=label,
            )
            values = {"init_scale": cfg.init_scale, "growth_factor": cfg.growth_factor,
                      "backoff_factor": cfg.backoff_factor, "growth_interval": cfg.growth_interval}
            attrs = {CONFIG: CORNER, CHECK: CORNER, POINT: point, DATA_SEED: settings.run.seed, **outcome.user_attrs}
            writer.add(
                optuna.trial.create_trial(
                    state=TrialState.COMPLETE,
                    value=outcome.value,
                    params=values,
                    distributions=_point_distributions(values, settings),
                    user_attrs=attrs,
                    intermediate_values=outcome.intermediate_values,
                )
            )
            failure = "nonfinite" if outcome.user_attrs.get(NONFINITE) else outcome.user_attrs.get(FAILURE, "none")
            corners.append({"point": point, "failure": failure, "value": outcome.value})
            made += 1
        if all(c["failure"] == "none" for c in corners if any(_same(c["point"], p) for p in points)):
            break
    return made


def _run_trial(*args: Any, **kwargs: Any) -> TrialOutcome:
    """:func:`search.training._objective.run_trial`; a task's ``sys.exit`` is an error (exit 1), never a success."""
    try:
        return run_trial(*args, **kwargs)
    except SystemExit as e:
        raise TaskError(f"the task called sys.exit({e.code!r}) during a run") from e


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(math.isclose(a[k], b[k], rel_tol=1e-9) for k in b)


def _open_sibling(plan: _Plan, args: argparse.Namespace) -> optuna.Study:
    """Creates or loads ``<study>.confirm`` and records what this confirmation asks for."""
    name = confirm_study_name(plan.study_name)
    study = optuna.create_study(
        storage=plan.storage, study_name=name, direction="minimize", load_if_exists=True
    )
    wanted: dict[str, Any] = {
        "source_study": plan.study_name,
        "seeds": plan.seeds,
        "top": args.top,
        "epochs": plan.settings.run.epochs,
        "configs": [
            {"label": c.label, "source_trial": c.source_trial, "params": c.params} for c in plan.candidates
        ],
    }
    if plan.pending:
        wanted["device"] = plan.device.type
    current = study.user_attrs
    for key, value in wanted.items():
        if current.get(key) != value:
            study.set_user_attr(key, value)
    return study


if __name__ == "__main__":
    sys.exit(main())

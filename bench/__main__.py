"""``python -m bench``: the service's speed and search efficiency, each figure a ratio measured
side by side in one run. Not a test: these machines are shared and noisy, so it prints numbers
and asserts nothing (CI does not run it).

P1  service overhead per trial vs plain Optuna, both on a default SQLite file (bench/p1_overhead.py)
P2  our trainer vs a plain copy of the original example's loop, same work (bench/p2_trainer.py)
P3  --workers 2 vs --workers 1, the real command; and a --workers 4 run's CPU in all processes, workers forked
    from the fork server vs each a fresh interpreter (bench/p3_workers.py); 1, 8 and 16 workers of trials that
    mostly sleep on one PostgreSQL database: trials/s and statements a trial (bench/many_workers.py); Optuna's
    gRPC storage proxy against direct RDB access, plain Optuna (bench/grpc_proxy.py)
P4  each sampler on three tasks, 5 sampler seeds, a default run's 100 trials: trials to 90% and 99%
    of the possible improvement and the share of it left at the end; picks the default sampler
    (bench/p4_search.py; about 45 min on 2 cores, or seconds with --p4-from a saved run)
P5  trials/s of population mode (--population 64 and 256) against ordinary trials, same task and
    device, one run (bench/p5_population.py)
S   time per trial as steps grow (bench/scaling.py), and as the study grows to 5,000 trials, beside plain
    Optuna (bench/study_size.py); a bad-input
    exit, search.report --help and a report of a finished 100-trial study, whole processes, against an
    older revision's commands (bench/commands.py)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import optuna
import torch

from bench.commands import OLDER_REVISION
from bench.p1_overhead import (
    PLAIN_USER_SCRIPT,
    plain_optuna_per_trial,
    plain_same_values_per_trial,
    service_overhead_per_trial,
    user_side_per_trial,
)
from bench.p2_trainer import loader_ratio, trainer_ratio
from bench.p3_workers import p3
from bench.p4_search import (
    ARMS,
    DIAGNOSED,
    TARGETS,
    TASKS,
    TIE,
    choose_default,
    diagnosed,
    load_runs,
    median_label,
    save_runs,
    search_efficiency,
)
from bench.p5_population import population_throughput
from bench.scaling import scaling
from bench.study_size import SIZES
from search.study import threads_per_process

PARTS = ("P1", "P2", "P3", "P4", "P5", "S")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "The service's speed and search efficiency (P1-P5, S), each figure a ratio measured side by "
            "side in one run (docs/benchmarks.md)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--only", default=",".join(PARTS), metavar="PARTS", help="parts to run, e.g. P1,S")
    add("--trials", type=int, default=60, metavar="N", help="trials per P1 measurement")
    add("--rounds", type=int, default=3, metavar="N", help="alternating rounds for P1")
    add(
        "--p1-user",
        default="20,40,160",
        metavar="A,B,C",
        help="P1 from the user's side: the same command resumed from A to B, then from B to C trials",
    )
    add("--repeats", type=int, default=40, metavar="N", help="interleaved runs for P2")
    add("--device", default="cpu", help="device of P2 and P5 (cpu, cuda, cuda:N)")
    add("--p3-trials", type=int, default=200, metavar="N", help="trials per P3 run")
    add("--p3-rounds", type=int, default=2, metavar="N", help="alternating rounds for P3")
    add("--p3-many", default="1,8,16", metavar="K,K", help="worker counts of P3 on PostgreSQL ('' to skip)")
    add("--p3-proxy", default="8,16", metavar="K,K", help="processes of P3's gRPC proxy run ('' to skip)")
    add("--p3-many-trials", type=int, default=20, metavar="N", help="trials a worker of P3 on PostgreSQL")
    add("--p3-start-workers", type=int, default=4, metavar="K", help="workers of P3's start-up measurement")
    add("--p4-tasks", default=",".join(TASKS), metavar="TASKS", help="comma-separated tasks for P4")
    add("--p4-budget", type=int, default=100, metavar="N", help="sampled trials per P4 run (a default run's)")
    add(
        "--p4-from",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="P4's figures from a --p4-save file, without running a trial",
    )
    add(
        "--p4-save",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="write every P4 run's objective values to PATH, as JSON",
    )
    add("--p4-seeds", type=int, default=5, metavar="N", help="sampler seeds per sampler for P4")
    add(
        "--p4-arms",
        default=",".join(ARMS),
        metavar="ARMS",
        help=(
            "P4's arms: samplers, tpe+diagnosis (TPE from the task's diagnosis, search.optimize"
            " --from-diagnosis) and random+diagnosis (random search on the same narrowed space)"
        ),
    )
    add("--p5-task", default="seed-mlp", metavar="TASK", help="task of P5")
    add("--p5-ordinary", type=int, default=16, metavar="N", help="ordinary trials timed for P5")
    add("--p5-populations", default="64,256", metavar="K,K", help="population sizes timed for P5")
    add(
        "--s-before",
        default=OLDER_REVISION,
        metavar="REV",
        help="the revision S's whole commands are timed against",
    )
    add(
        "--size-windows",
        default=",".join(str(n) for n in SIZES),
        metavar="N,N",
        help="study sizes at which S times 100 TPE trials",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.p1_user.split(",") if n.strip().isdigit()]
    if (
        len(counts) != 3
        or not 0 < counts[0] < counts[1] < counts[2]
        or counts[2] - counts[1] == counts[1] - counts[0]
    ):
        parser.error(f"--p1-user {args.p1_user}: three trial counts A < B < C with C - B != B - A")
    for name in ("p4_save", "p4_from"):  # The parts run in a temporary directory.
        if getattr(args, name, None):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    parts = {p.strip().upper() for p in args.only.split(",")}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # As the service trains (search.study._workers.threads_per_process): one thread unless OMP_NUM_THREADS
    # says.
    torch.set_num_threads(threads_per_process())
    print(
        f"torch {torch.__version__}, optuna {optuna.__version__}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads"
    )
    table: list[tuple[str, str, str]] = []
    took: dict[str, float] = {}
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            runs = {
                "P1": lambda: p1(args, tmp),
                "P2": lambda: p2(args),
                "P3": lambda: p3(args, tmp),
                "P4": lambda: p4(args),
                "P5": lambda: p5(args),
                "S": lambda: scaling(args, tmp),
            }
            for part in PARTS:
                if part in parts:
                    start = time.perf_counter()
                    table += runs[part]()
                    took[part] = time.perf_counter() - start
        finally:
            os.chdir(home)
    print("\nSummary (each ratio measured side by side in this run)")
    for name, value, target in table:
        print(f"  {name:52} {value:>8}   {target}")
    print("  time per part: " + ", ".join(f"{part} {seconds:.0f} s" for part, seconds in took.items()))


def p1(args: argparse.Namespace, tmp: str) -> list[tuple[str, str, str]]:
    # Rounds alternate the arms so that a noisy neighbour hits both alike; medians are reported.
    rounds = []
    for r in range(args.rounds):
        directory = os.path.join(tmp, f"p1-{r}")
        os.makedirs(directory)
        os.chdir(directory)
        memory = plain_optuna_per_trial(None, args.trials)
        reference = plain_optuna_per_trial("sqlite:///plain.db", args.trials)
        ours, ours_sampled, train_s, template = service_overhead_per_trial(
            os.path.join(directory, "study.db"), args.trials
        )
        same = plain_same_values_per_trial("sqlite:///same.db", args.trials, template, curve=True)
        no_curve = plain_same_values_per_trial("sqlite:///nocurve.db", args.trials, template, curve=False)
        rounds.append((memory, reference, same, no_curve, ours, ours_sampled, train_s))
        print(
            f"  P1 round {r + 1}: plain same values {same * 1000:.1f} ms, without curve {no_curve * 1000:.1f}"
            f" ms, 3 params {reference * 1000:.1f} ms; ours {ours * 1000:.1f} ms ({ours / same:.2f}x)"
        )
    os.chdir(tmp)
    memory, reference, same, no_curve, ours, ours_sampled, train_s = (
        statistics.median(col) for col in zip(*rounds)
    )
    print(f"\nP1 overhead per trial ({args.trials} trials, TPE, median of {args.rounds} rounds):")
    print(f"  plain Optuna, in-memory, 3 params (floor)           {memory * 1000:8.1f} ms")
    print(f"  plain Optuna, SQLite, same values as ours            {same * 1000:8.1f} ms   1.00x")
    print(f"  plain Optuna, SQLite, same values but no loss curve  {no_curve * 1000:8.1f} ms")
    print(f"  plain Optuna, SQLite, 3 params + 9 attrs (reference) {reference * 1000:8.1f} ms")
    print(
        f"  this service, SQLite, all trials                     {ours * 1000:8.1f} ms   {ours / same:.2f}x"
        f"   ({ours / no_curve:.2f}x of no-curve, {ours / reference:.2f}x of reference)"
    )
    print(
        f"  this service, SQLite, sampled trials                 {ours_sampled * 1000:8.1f} ms   "
        f"{ours_sampled / same:.2f}x"
    )
    print(
        f"  (training itself: {train_s * 1000:.1f} ms per trial; a trial stores {len(template.params)}"
        f" params, {len(template.user_attrs)} user attrs, {len(template.intermediate_values)} intermediate"
        " values)"
    )
    script = os.path.join(tmp, "plain_user.py")
    with open(script, "w") as f:
        f.write(PLAIN_USER_SCRIPT)
    # A difference of differences of whole commands is noisy (one run gave 1.15x where the runs around it
    # gave 0.37x-0.52x): rounds, each a fresh directory, and the median of each arm.
    counts = tuple(int(n) for n in args.p1_user.split(","))
    sides = []
    for r in range(args.rounds):
        user_dir = os.path.join(tmp, f"p1-user-{r}")
        os.makedirs(user_dir)
        sides.append(user_side_per_trial(user_dir, script, *counts))
        print(
            f"  P1 user side, round {r + 1}: ours {sides[-1][0] * 1000:.1f} ms, plain script"
            f" {sides[-1][1] * 1000:.1f} ms, with 4 params {sides[-1][2] * 1000:.1f} ms"
        )
    user, plain_user, plain_four = (statistics.median(col) for col in zip(*sides))
    print(
        f"  from the user's side (whole commands resumed {' -> '.join(map(str, counts))} trials, training"
        f" subtracted; median of {args.rounds} rounds):"
    )
    print(f"  plain Optuna script, SQLite, 3 params + 9 attrs      {plain_user * 1000:8.1f} ms   1.00x")
    print(f"  the same script searching growth_interval too (4)    {plain_four * 1000:8.1f} ms")
    print(
        f"  python -m search.optimize                            {user * 1000:8.1f} ms  "
        f" {user / plain_user:.2f}x   ({user / plain_four:.2f}x of the 4-param script)"
    )
    return [
        (
            "P1 user side: search.optimize / plain Optuna script",
            f"{user / plain_user:.2f}x",
            "target <= 0.2x",
        ),
        ("P1 user side ... / the script with the service's 4 params", f"{user / plain_four:.2f}x", ""),
        ("P1 service overhead / plain Optuna, same values", f"{ours / same:.2f}x", "target <= 0.3x"),
        ("P1 ... / plain Optuna, same values without curve", f"{ours / no_curve:.2f}x", ""),
        ("P1 ... / plain Optuna, 3 params + 9 attrs", f"{ours / reference:.2f}x", ""),
    ]


def p2(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    ratio, o, s = trainer_ratio(torch.device(args.device), args.repeats)
    print(f"\nP2 train time per trial on {args.device} (seed-mlp, 30 epochs, median of {args.repeats}):")
    print(f"  original example's loop, device-correct          {s * 1000:8.1f} ms   1.00x")
    print(f"  search.training._trainer.train                   {o * 1000:8.1f} ms   {ratio:.2f}x")
    general, lo, te = loader_ratio(torch.device(args.device), max(3, args.repeats // 8))
    print(f"  deep-mlp, 256 mini-batch steps: tensor path {te * 1000:8.1f} ms   1.00x")
    print(f"  the same batches as a LoaderProblem     {lo * 1000:8.1f} ms   {general:.2f}x")
    return [
        ("P2 our trainer / the original example's loop", f"{ratio:.2f}x", "target <= 1.0x"),
        ("P2 LoaderProblem path / tensor path, same batches", f"{general:.2f}x", "target <= 1.05x"),
    ]


def p4(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    tasks = [t.strip() for t in args.p4_tasks.split(",") if t.strip()]
    results = []
    rows = []
    try:
        saved = load_runs(args.p4_from, args.p4_budget) if getattr(args, "p4_from", None) else None
    except (OSError, ValueError, KeyError) as e:
        print(f"bench: error: --p4-from: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    arms = tuple(a.strip() for a in args.p4_arms.split(",") if a.strip())
    if not saved and all(diagnosed(a) for a in arms):  # Before 30 minutes of runs, not after.
        print(
            "bench: error: --p4-arms: add an arm on the whole space (e.g. random): a diagnosis can narrow "
            "PyTorch's default out of the others, and P4 measures from the default",
            file=sys.stderr,
        )
        raise SystemExit(2)
    for task in [r.task for r in saved] if saved else tasks:
        r = (
            next(x for x in saved if x.task == task)
            if saved
            else search_efficiency(task, args.p4_budget, args.p4_seeds, arms)
        )
        results.append(r)
        seeds = len({x.seed for x in r.runs})
        print(
            f"\nP4 trials to the target ({task}, budget {args.p4_budget}, {seeds} sampler seeds; "
            f"best-known {r.best:.4f}, default (seed-1) {r.default:.4f}):",
            flush=True,
        )
        for target, words in TARGETS.items():
            print(f"  {words} (<= {r.targets[target]:.4f}):")
            for sampler in r.arms:
                _, label = median_label(r.reach[target][sampler], args.p4_budget)
                print(f"    {sampler:16} median {label:>5}   per seed {r.reach[target][sampler]}")
        print(
            f"  share of the gap left after {args.p4_budget} trials (median of seeds), time a trial outside"
            " training:"
        )
        for sampler in r.arms:
            print(f"    {sampler:16} {r.regret[sampler]:7.1%}   {r.overhead[sampler] * 1000:6.1f} ms")
        if any(diagnosed(a) for a in r.arms):
            print(
                f"  +diagnosis: the diagnosis cost {r.diagnosis_trials:.1f} trials' time (its three runs"
                " against a random trial, start to finish), counted in the '+ diagnosis' figures"
            )
        for target in ("gap10", "gap"):
            random = statistics.median(r.reach[target]["random"])
            bound = "<=" if random > args.p4_budget else ""  # Random censored: the ratio is a bound.
            level = "90%" if target == "gap10" else "99%"
            for s in r.arms[1:]:
                mine = statistics.median(r.reach[target][s])
                target_note = (
                    "target <= 0.5x" if s == DIAGNOSED and target == "gap10" else ""
                )  # the default sampler
                rows.append(
                    (f"P4 {task} {level}: trials {s} / random", f"{bound}{mine / random:.2f}x", target_note)
                )
                if diagnosed(s):
                    rows.append(
                        (
                            f"P4 {task} {level}: trials {s} + diagnosis / random",
                            f"{bound}{(mine + r.diagnosis_trials) / random:.2f}x",
                            target_note,
                        )
                    )
    if getattr(args, "p4_save", None):
        save_runs(results, args.p4_save)
        print(f"\n  every run's values: {args.p4_save}")
    chosen, scores = choose_default(results, args.p4_budget)
    tasks = [r.task for r in results]
    print(
        f"\nP4 the default sampler, by measurement over {', '.join(tasks)} (median task; ranked by the share"
        f" of the gap left after {args.p4_budget} trials; within {TIE:.0%} of the gap of the lowest is a tie,"
        " won by the cheapest trial):"
    )
    for sampler in scores:
        regret, ninety, ninety_nine, cost = scores[sampler]
        mark = "   <- chosen" if sampler == chosen else ""
        print(
            f"  {sampler:16} gap left {regret:6.1%}   90%: {median_label([ninety], args.p4_budget)[1]:>4}"
            f" trials   99%: {median_label([ninety_nine], args.p4_budget)[1]:>4} trials   {cost * 1000:6.1f}"
            f" ms a trial{mark}"
        )
    random = scores["random"]
    rows.append(
        (
            f"P4 default by measurement: {chosen}, median task, gap left / random's",
            f"{scores[chosen][0] / random[0]:.2f}x" if random[0] else "-",
            f"{scores[chosen][3] * 1000:.1f} ms a trial outside training",
        )
    )
    rows.append(
        (
            f"P4 {chosen}, median task, 90%: trials / random",
            f"{scores[chosen][1] / random[1]:.2f}x",
            "target <= 0.5x",
        )
    )
    return rows


def p5(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    populations = tuple(int(k) for k in args.p5_populations.split(","))
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs"
    rows = population_throughput(args.p5_task, args.device, populations, args.p5_ordinary)
    print(
        f"\nP5 population mode, trials/s ({args.p5_task} on {args.device}, {where}; one run, same settings):"
    )
    for label, rate, ratio in rows:
        print(f"  {label:45} {rate:9.2f} trials/s   {ratio:6.2f}x")
    # The target is a GPU's: a tiny model leaves it launch-bound. A CPU's fp16 products are
    # compute-bound, so batching saves per-op overhead only; its figure is printed as measured.
    target = "target >= 20x on a GPU" + ("; CPU, printed as measured" if device.type == "cpu" else "")
    return [
        (f"P5 {args.p5_task}: {label.split(' (')[0]} / ordinary, trials/s", f"{ratio:.2f}x", target)
        for label, _rate, ratio in rows[1:]
    ]


if __name__ == "__main__":
    main()

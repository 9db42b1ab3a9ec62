"""Worker processes on one host: ``--workers K`` and ``--devices``.

The parent validates the input and creates the study once, then starts K processes that each run
the ordinary trial loop on the same study (the database coordinates them; there is no scheduler
here). The parent shows one progress bar for the whole study by polling its finished count, and
forwards SIGINT/SIGTERM/SIGHUP to the workers once: each records its trial in flight as FAIL.

Workers run in their own process group, so a Ctrl-C in the terminal reaches the parent only and
each worker sees exactly one SIGINT (from the parent), never two.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import select
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver, resource_tracker
from typing import Any

from search.core import WORKER_ENV, take_pending

# Not search.core._interrupts' handlers: the parent has no trial in flight to record, so a signal does not
# stop
# it; it forwards the signal, once to each worker, and waits for them to record theirs. SIGHUP is
# forwarded too, as SIGTERM: the workers, in their own process group, never get the terminal's.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DevicePlanError(ValueError):
    """``--devices``/``--device`` ask for GPUs this machine does not have."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's place: its index among ``count`` and the device it trains on."""

    index: int
    count: int
    device: str
    threads: int


@dataclass(frozen=True)
class PoolResult:
    """How the workers ended."""

    exit_codes: tuple[int, ...]
    signum: int | None  # The signal the parent received and forwarded, if any.
    unknown: frozenset[int] = frozenset()  # Workers whose exit code was lost: the fork server died first.


def threads_per_process(requested: int = 0) -> int:
    """torch intra-op threads for one process (each ``--workers`` worker is one).

    ``requested`` (``--threads``) when given; else ``OMP_NUM_THREADS`` when the user set it; else 1.
    One thread, because intra-op threads that share cores with another process spin at every
    barrier: measured on 2 cores with one other busy process, a 256-step deep-mlp trial took 15.4 s
    with torch's default 2 threads and 0.30 s with 1 (alone: 0.33 s and 0.30 s; seed-mlp 26 and 29
    ms), so one thread costs these tasks nothing alone and saves them from collapse when shared;
    ``--workers K`` is how a search uses K cores.
    """
    if requested > 0:
        return requested
    from_env = os.environ.get("OMP_NUM_THREADS", "")
    return int(from_env) if from_env.isdigit() and int(from_env) > 0 else 1


def plan_workers(workers: int, device: str, devices: str, threads: int = 0) -> list[WorkerSpec]:
    """Assigns a device to each worker.

    With ``devices`` ("0,1,3"), worker i uses ``cuda:devices[i mod len]``. Otherwise with
    ``device`` auto (CUDA available) or ``cuda``, worker i uses ``cuda:(i mod device_count)``; an
    explicit ``cuda:N`` or ``cpu`` puts every worker there.

    Each worker gets :func:`threads_per_process` (``threads``) torch threads.

    Raises:
        DevicePlanError: When the GPUs asked for are not visible.
    """
    import torch  # Here: a command that only checks its input must not pay for it.

    threads = threads_per_process(threads)
    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    if devices:
        if not cuda:
            raise DevicePlanError(f"--devices {devices}: CUDA is not available on this machine")
        indices = [int(d) for d in devices.split(",")]
        missing = [i for i in indices if i >= count]
        if missing:
            raise DevicePlanError(f"--devices {devices}: only {count} CUDA device(s) visible")
        names = [f"cuda:{indices[i % len(indices)]}" for i in range(workers)]
    elif device == "cuda" or (device == "auto" and cuda):
        if not cuda:
            raise DevicePlanError(f"--device {device}: CUDA is not available on this machine")
        names = [f"cuda:{i % count}" for i in range(workers)]
    else:
        names = ["cpu" if device == "auto" else device] * workers
    return [WorkerSpec(i, workers, name, threads) for i, name in enumerate(names)]


def worker_context(target: Callable[..., Any]) -> multiprocessing.context.BaseContext:
    """How ``--workers`` processes start: forked from a fork server that has imported torch once.

    The server (:mod:`search.study._fork_server`) is a fresh interpreter, so a worker inherits no
    database connection and no CUDA state from the parent, and has imported ``target``'s module,
    torch and ``torch._dynamo`` (which the first ``torch.optim`` optimizer imports: 1.4 s of CPU)
    only once for every worker. The server is this process's multiprocessing fork server: it is
    started here, once, and a program of its own that uses the forkserver start method after a
    pool shares it (a server already running when this is first called keeps its own preloads).
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["search.study._fork_server", "torch", "torch._dynamo", target.__module__])
    # SIGINT, SIGTERM and SIGHUP blocked while the helper processes start: each inherits the block
    # from its first instruction, so a Ctrl-C or hang-up to the terminal's group cannot kill one
    # while it starts (a killed fork server failed the run with "EOFError"), and the parent gets the
    # signal once it unblocks. multiprocessing's resource tracker (it removes the shared flag's
    # semaphore) then unblocks only SIGINT and SIGTERM, which it ignores: a hang-up had killed it,
    # with its "died unexpectedly" warnings and a traceback.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    os.environ[WORKER_ENV] = "1"  # The server's guard: a worker not yet in its loop ends quietly.
    try:
        resource_tracker.ensure_running()  # It unblocks SIGINT and SIGTERM as it returns (bpo-33613): again.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        forkserver.ensure_running()
    finally:
        del os.environ[WORKER_ENV]
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return context


def _child(target: Callable[..., int], args: tuple[Any, ...]) -> None:
    os.setpgrp()  # Out of the terminal's process group: only the parent forwards signals.
    # Blocked since the fork (search.study._fork_server): a signal forwarded meanwhile arrives now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    raise SystemExit(target(*args))


def _pidfd(pid: int) -> int | None:
    """A descriptor of process ``pid`` that no reuse of the number can mislead, or None if it is gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def _still_running(pidfd: int | None) -> bool:
    return pidfd is not None and not select.select([pidfd], [], [], 0)[0]  # Readable once it has ended.


def run_pool(
    target: Callable[..., int],
    specs: Sequence[WorkerSpec],
    args: tuple[Any, ...],
    poll: Callable[[], None],
    poll_interval: float = 0.5,
) -> PoolResult:
    """Runs ``target(*args, spec)`` in one process per spec (:func:`worker_context`) and waits for all of
    them.

    Args:
        target: A module-level function (it is imported by the child) returning an exit code.
        specs: One per worker.
        args: Picklable arguments before the spec.
        poll: Called every ``poll_interval`` seconds while workers run (the progress bar).
    """
    context = worker_context(target)
    processes = [
        context.Process(target=_child, args=(target, (*args, spec)), name=f"worker-{spec.index}")
        for spec in specs
    ]
    pidfds: list[int | None] = []
    received: list[int] = []
    signalled: set[int] = set()
    unknown: set[int] = set()  # Workers whose end the fork server could not report: it died.

    def running(i: int) -> bool:
        if processes[i].exitcode is None:
            return True
        # The server reports each worker's end; a dead server reads as 255 for every worker, ended or not.
        if processes[i].exitcode == 255 and _still_running(pidfds[i]):
            unknown.add(i)
            return True
        return False

    def send() -> None:
        for i, process in enumerate(processes):
            if i < len(pidfds) and process.pid not in signalled and running(i):
                signalled.add(process.pid)
                try:
                    if pidfds[i] is not None:
                        signal.pidfd_send_signal(pidfds[i], received[0])
                    else:
                        os.kill(process.pid, received[0])
                except ProcessLookupError:  # It ended since: the server reaps before it reports.
                    pass

    def forward(signum: int, _frame: Any) -> None:
        if not received:  # A second Ctrl-C: the workers are already finishing their trials.
            # A hang-up (the terminal closed) stops the workers the way SIGTERM does, which
            # they handle: each records its trial in flight as FAIL.
            received.append(signal.SIGTERM if signum == signal.SIGHUP else signum)
        send()

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    pending = take_pending()  # Recorded while the command was starting (search.cli._startup).
    if pending is not None:
        received.append(pending)
    try:
        for process in processes:
            process.start()
            pidfds.append(_pidfd(process.pid))
        if received:  # A signal that came while the workers were starting.
            send()
        while True:
            alive = [i for i in range(len(processes)) if running(i)]
            if not alive:
                break
            poll()
            waited = [processes[i].sentinel for i in alive if i not in unknown]
            waited += [pidfds[i] for i in alive if i in unknown]
            multiprocessing.connection.wait(waited, timeout=poll_interval)
        poll()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for fd in pidfds:
            if fd is not None:
                os.close(fd)
    codes = tuple(p.exitcode if p.exitcode is not None else 1 for p in processes)
    return PoolResult(codes, received[0] if received else None, frozenset(unknown))

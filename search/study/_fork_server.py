"""Imported first by the fork server that starts ``--workers`` processes
(:func:`search.study._workers.worker_context`).

The fork server is a fresh interpreter that the parent starts once; it imports torch and the trial
loop once, then forks each worker from itself. A worker that started as a fresh interpreter of its
own spent ~3 s of CPU importing torch, torch's compiler front end (which the first optimizer
imports) and Optuna. On 2 cores, a whole ``--workers 4`` run of 20 seed-mlp trials took 12.1 s of
CPU in all processes with the fork server and 22.6 s with a fresh interpreter per worker (1.87x),
9.9 s and 13.3 s of wall time (``python -m bench --only P3``, docs/benchmarks.md).

The parent starts the server with SIGINT, SIGTERM and SIGHUP blocked
(:func:`search.study._workers.worker_context`), so it cannot be killed by the terminal while it starts up.
This module then does two things, before the server's own set-up:

* The server leaves the terminal's process group. A Ctrl-C or hang-up in the terminal then reaches
  the parent only, which forwards it to the workers. It ends once the parent and its workers have
  (each holds the pipe that keeps it alive); if it dies first, the parent waits for the workers by
  their process descriptors and says that their exit codes are unknown.
* The signals stay blocked, and each worker inherits the block until it unblocks them
  (:func:`search.study._workers._child`). The server ignores SIGINT, and a forked child keeps
  ignoring it until it has restored its handlers: a signal the parent forwarded in that moment
  would be lost, and the worker would run the whole study (it did, in a Ctrl-C test). A blocked
  signal is never ignored: Linux keeps it pending until the worker unblocks it.

Importing ``search`` ran :func:`search.cli._startup.guard` before this: the parent starts the
server with ``SEARCH_WORKER_PROCESS`` set, so a worker that gets SIGINT or SIGTERM before it
installs its own handlers ends quietly with 128 + signum.
"""

from __future__ import annotations

import os
import signal

os.setpgrp()
# As inherited; again in case a relaunched resource tracker unblocked SIGINT and SIGTERM in the parent first.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

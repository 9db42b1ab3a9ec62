"""``python -m search.dashboard``: optuna-dashboard on a study, with its curves published first.

What optuna-dashboard then shows (each trial's loss curve and note, the study page's curves and
trial explorer, the study note) is written by :func:`search.publishing._publish.publish`, whose docstring
lists it. ``publish`` also runs at the end of every ``search.optimize`` run, so
``optuna-dashboard sqlite:///study.db`` alone shows the same. This command publishes (in one
transaction) and then serves optuna-dashboard on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Sequence

import optuna
from optuna.artifacts import FileSystemArtifactStore

from search.cli import OneLineParser, Session, fail, prog_name, run_command
from search.core import Interrupted, UsageError, interrupts_as_exceptions, raise_interrupted, take_pending
from search.publishing import PublishReport, publish, publish_pictures
from search.storage import (
    StorageError,
    close_storage,
    first_line,
    is_read_only,
    mask_url,
    open_existing_storage,
    redact,
)

__all__ = ["PublishReport", "publish", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.dashboard"),
        description="Publish the study's curves and notes, then serve optuna-dashboard on it.",
        allow_abbrev=False,
    )
    p.add_argument("--storage", default="sqlite:///study.db", help="Optuna storage URL [sqlite:///study.db]")
    p.add_argument("--study-name", default=None, help="study to publish figures for [every study]")
    p.add_argument("--host", default="127.0.0.1", help="address to bind [127.0.0.1: this machine only]")
    p.add_argument("--port", type=int, default=8080, help="port [8080]")
    p.add_argument("--no-publish", action="store_true", help="serve only; write nothing to the storage")
    p.add_argument(
        "--artifact-dir",
        default=None,
        metavar="DIR",
        help=(
            "where each trial's loss-and-scale picture is drawn and served from [beside a SQLite file: "
            "<file>-artifacts; for a database server: ./dashboard-artifacts]"
        ),
    )
    p.add_argument("--publish-only", action="store_true", help="publish, then exit without serving")
    return p


def _fail(message: str) -> int:
    return fail("search.dashboard", message)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (2 for bad input, 1 when --publish-only could not publish)."""
    return run_command("search.dashboard", _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        return _fail(f"--port must be 1..65535, got {args.port}")
    if args.no_publish and args.publish_only:
        return _fail("--no-publish and --publish-only contradict each other (write nothing, or only write)")
    url = args.storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else None
    if path is not None:
        if not os.path.isfile(path):
            return _fail(
                f"no study file {path} here (run python -m search.optimize first, or pass --storage)"
            )
    try:
        # Deferred SQLite transactions: serving only reads, and must not hold the workers' write lock.
        storage = session.keep(
            open_existing_storage(url)
        )  # Closed on every path: SQLite removes its -wal/-shm.
        names = [s.study_name for s in storage.get_all_studies()]
    except StorageError as e:
        return _fail(str(e))
    except Exception as e:  # Unreachable or not an Optuna database.
        return _fail(f"cannot read {mask_url(url)}: {redact(first_line(e), url)}")
    return _publish_and_serve(args, storage, names, path)


def _publish_and_serve(
    args: argparse.Namespace, storage: optuna.storages.RDBStorage, names: list[str], path: str | None
) -> int:
    url = args.storage
    if args.study_name is not None and args.study_name not in names:
        return _fail(
            f"no study {args.study_name!r} in {mask_url(url)} (studies: {', '.join(names) or 'none'})"
        )
    publishing = not args.no_publish
    if publishing and is_read_only(url):  # Read-only media: optuna-dashboard can still show it.
        if args.publish_only:
            return _fail(f"{mask_url(url)} is read-only: nothing can be published to it")
        print(
            f"search.dashboard: note: {mask_url(url)} is read-only: serving it without publishing",
            file=sys.stderr,
        )
        publishing = False
    artifact_dir = args.artifact_dir or (f"{path}-artifacts" if path is not None else "dashboard-artifacts")
    # Everything that can be refused is checked before anything is written.
    try:
        if not args.publish_only:
            _check_can_serve(args.host, args.port)
        if publishing:
            _make_artifact_dir(artifact_dir)
    except UsageError as e:
        return _fail(str(e))
    if publishing:
        try:
            with interrupts_as_exceptions():
                missed = _publish_all(url, [args.study_name] if args.study_name else names, artifact_dir)
        except Interrupted as e:  # Each study's figures and notes are written in one transaction.
            return fail(
                "search.dashboard", f"interrupted ({e}) while publishing; trials untouched", 128 + e.signum
            )
        if missed and args.publish_only:
            return fail(
                "search.dashboard", f"not published: {', '.join(missed)} (the warnings above say why)", 1
            )
    signum = take_pending()  # Recorded while starting or publishing outside its block (search.cli._startup).
    if signum is not None:
        return fail(
            "search.dashboard", f"interrupted ({signal.Signals(signum).name}) before serving", 128 + signum
        )
    if args.publish_only:
        return 0
    print(f"search.dashboard: serving {mask_url(url)} on http://{args.host}:{args.port}/", file=sys.stderr)
    from optuna_dashboard import run_server

    # Serving ends with Ctrl-C (a success: that is how a server is stopped) or SIGTERM.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, raise_interrupted),
    }
    try:
        store = FileSystemArtifactStore(artifact_dir) if os.path.isdir(artifact_dir) else None
        run_server(storage, host=args.host, port=args.port, artifact_store=store)
    except OSError as e:  # Port in use, address not available here.
        return _fail(f"cannot serve on {args.host}:{args.port}: {e.strerror or first_line(e)}")
    except KeyboardInterrupt:
        return 0
    except Interrupted as e:
        return 128 + e.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def _check_can_serve(host: str, port: int) -> None:
    """Binds ``host:port`` once as the server will (address reuse on), so a port in use or an
    address not of this machine is refused before anything is published."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"--host {host}: {getattr(e, 'strerror', None) or first_line(e)}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            raise UsageError(f"cannot serve on {host}:{port}: {e.strerror or first_line(e)}") from None


def _make_artifact_dir(path: str) -> None:
    """The trial pictures' directory: an existing writable one, or one made now in an existing parent."""
    if os.path.isdir(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"--artifact-dir {path} is not writable")
        return
    if os.path.exists(path):
        raise UsageError(f"--artifact-dir {path} is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--artifact-dir {path}: {parent} does not exist")
    try:
        os.mkdir(path)
    except OSError as e:  # os.access trusts root and /proc: only making it tells.
        raise UsageError(f"--artifact-dir {path}: cannot be created ({e.strerror})") from None


def _publish_all(url: str, names: list[str], artifact_dir: str) -> list[str]:
    """Publishes every study of this service among ``names``; returns those that could not be."""
    # Writes take SQLite's write lock up front (BEGIN IMMEDIATE), like the workers' own writes.
    missed: list[str] = []
    writer = open_existing_storage(url, immediate=True)
    try:
        for name in names:
            study = optuna.load_study(
                storage=writer, study_name=name, sampler=optuna.samplers.RandomSampler()
            )
            if "task" not in study.user_attrs:
                continue  # Not a study of this service (or a search.confirm sibling).
            try:
                trials = study.get_trials(deepcopy=False)  # Read once for both.
                report = publish(study, trials, storage_url=url)
                pictures = publish_pictures(study, artifact_dir, trials)
            except Exception as e:  # The study is fine; only its figures are not refreshed.
                print(
                    f"search.dashboard: warning: {name}: not published: {redact(first_line(e), url)}",
                    file=sys.stderr,
                )
                missed.append(name)
                continue
            print(
                f"search.dashboard: {name}: {len(report.figures)} figures, {report.trial_notes} new trial"
                f" notes, {pictures} new trial pictures in {artifact_dir}",
                file=sys.stderr,
            )
    finally:
        close_storage(writer)
    return missed


if __name__ == "__main__":
    sys.exit(main())

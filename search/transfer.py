"""``python -m search.transfer``: copy a study to another storage, e.g. to resume it elsewhere.

``python -m search.transfer --from URL --to URL [--study-name NAME]`` copies one study (SQLite,
PostgreSQL or MySQL, in any direction) with all its trials and attrs, including the recorded
settings that ``search.optimize`` checks on resume, then reads the copy back and compares it with
what was read from the source. The destination write is :func:`optuna.copy_study`; around it:

* The source is read once, into an in-memory snapshot. Everything written and verified is that
  snapshot, so a source that is still running gives a consistent copy.
* A trial RUNNING in the source is copied as FAIL with user attr ``fail_reason``: a RUNNING trial
  in the copy has no worker and no heartbeat, so it would never finish there. WAITING trials
  (the enqueued seed baselines, retries queued by Optuna's stale-trial callback) stay WAITING.
* Trial *ids* change (every storage numbers its rows itself); trial *numbers* do not. What is
  keyed by trial id in the study's system attrs is re-keyed to the new ids, matched by trial
  number: optuna-dashboard's trial notes (``dashboard:<id>:note_ver``,
  ``dashboard:<id>:note_str:<i>``), its legacy artifact records (``dashboard:artifacts:<id>:<artifact>``)
  and preferential skips (``preference:skip_trial:<id>``), and Optuna's GA samplers' parent caches
  (``<Sampler>:parent:<generation>``, a list of trial ids). ``failed_trial`` and ``retry_history``
  (Optuna's ``RetryHeartbeatStaleTrialCallback``) hold trial numbers and need nothing.

* search.confirm's sibling study ``<study>.confirm`` is copied along (``--no-confirm`` skips it),
  as ``<target>.confirm`` with its ``source_study`` attr following a rename.

Exit codes: 0 copied and verified, 1 the copy failed or differs from the source, 2 bad input
(nothing written to the destination). Passwords in URLs are masked in every message.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from search.cli import OneLineParser, Session, fail, prog_name, run_command
from search.core import CONFIRM_SUFFIX, FAIL_REASON, Interrupted, UsageError, interrupts_as_exceptions
from search.results import confirm_study_name
from search.storage import (
    StorageError,
    choose_study,
    close_storage,
    first_line,
    mask_url,
    open_existing_storage,
    open_storage,
    redact,
    sqlite_path,
)

__all__ = [
    "RUNNING_FAIL_REASON",
    "TransferError",
    "TransferFailed",
    "TransferReport",
    "build_parser",
    "format_report",
    "main",
    "transfer_study",
]

PROG = "search.transfer"
RUNNING_FAIL_REASON = (
    "was RUNNING in the source when search.transfer copied the study; a copy cannot finish it"
)

# Study system attrs whose key holds a trial id (group 1): optuna-dashboard 0.21's notes
# (optuna_dashboard/_note.py), legacy artifact records (artifact/_backend.py) and preferential
# skips (preferential/_system_attrs.py).
_DASHBOARD_ID_KEYS = (
    re.compile(r"^dashboard:(\d+):note_(?:ver|str:\d+)$"),
    re.compile(r"^dashboard:artifacts:(\d+):.+$"),
    re.compile(r"^preference:skip_trial:(\d+)$"),
)
# Optuna's GA samplers (NSGA-II/III) cache a generation's parents as a list of trial ids.
_SAMPLER_ID_LIST_KEY = re.compile(r"^[A-Za-z_]\w*:parent:\d+$")
_ARTIFACT_PREFIXES = ("artifacts:", "dashboard:artifacts:")
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


class TransferError(UsageError):
    """Bad input: nothing was written to the destination. The message is password-free."""


class TransferFailed(RuntimeError):
    """A storage error while reading the source or writing the copy (a partial copy is removed)."""


@dataclass(frozen=True)
class TransferReport:
    """What :func:`transfer_study` copied and whether the copy matches the source.

    Attributes:
        study_name: The study's name in the source.
        to_study_name: Its name in the destination.
        from_url: The source URL, password masked.
        to_url: The destination URL, password masked.
        states: Trials in the copy per state name (``COMPLETE``, ``FAIL``, ...).
        running_converted: Numbers of the trials RUNNING in the source, copied as FAIL.
        dashboard_keys_remapped: optuna-dashboard study system attrs re-keyed to new trial ids.
        sampler_keys_remapped: Sampler study system attrs whose trial ids were remapped.
        dropped_keys: Trial-id keyed attrs naming no trial of the study (not copied).
        artifacts: Artifact records in the study (their files live in the artifact store).
        user_attrs: Study user attrs copied.
        system_attrs: Study system attrs copied.
        overwritten: Whether a study of the same name in the destination was replaced.
        verified: Whether the copy read back equals the snapshot of the source.
        mismatches: What differs, when not verified.
        siblings: The reports of the studies copied along: search.confirm's ``<study>.confirm``.
        skipped: Sibling studies the source holds that were not copied (``--no-confirm``).
        aligned_distributions: Trials whose one-value distributions were given the study's log
            flag so that Optuna would take them (the only change the copy makes to a trial).
    """

    study_name: str
    to_study_name: str
    from_url: str
    to_url: str
    states: dict[str, int]
    running_converted: tuple[int, ...]
    dashboard_keys_remapped: int
    sampler_keys_remapped: int
    dropped_keys: tuple[str, ...]
    artifacts: int
    user_attrs: int
    system_attrs: int
    overwritten: bool
    verified: bool
    mismatches: tuple[str, ...] = ()
    siblings: tuple[TransferReport, ...] = ()
    skipped: tuple[str, ...] = ()
    aligned_distributions: tuple[int, ...] = ()

    @property
    def trials(self) -> int:
        """Number of trials copied."""
        return sum(self.states.values())

    @property
    def all_verified(self) -> bool:
        """This study's copy and every sibling's match their sources."""
        return self.verified and all(s.verified for s in self.siblings)


@dataclass(frozen=True)
class _Snapshot:
    """One read of the source study, RUNNING trials already turned into FAIL."""

    directions: list[StudyDirection]
    user_attrs: dict[str, Any]
    plain_system_attrs: dict[str, Any]  # Copied as they are.
    id_keyed_system_attrs: dict[str, Any]  # Re-keyed after the copy.
    trials: list[FrozenTrial]
    running_converted: tuple[int, ...]
    aligned: tuple[int, ...] = ()  # Trials whose one-value distributions took the study's log flag.


def transfer_study(
    from_url: str,
    to_url: str,
    study_name: str | None = None,
    to_study_name: str | None = None,
    overwrite: bool = False,
    with_confirm: bool = True,
) -> TransferReport:
    """Copies a study from one storage to another and verifies the copy.

    Args:
        from_url: Source storage URL (must hold the study).
        to_url: Destination storage URL; a SQLite file is created if missing.
        study_name: The study to copy; None picks the source's only study.
        to_study_name: Its name in the destination; None keeps the name.
        overwrite: Replace a study of that name in the destination.
        with_confirm: Copy search.confirm's sibling ``<study>.confirm`` along, when the source has
            one (as ``<to_study_name>.confirm``): without it the copy's summary and report would
            lose the confirmation, and ``search.confirm`` there would train every run again.

    Returns:
        The report; ``verified`` is False (and ``mismatches`` says why) if the copy read back
        differs from the source; ``siblings`` holds the sibling's report.

    Raises:
        TransferError: Bad input; nothing was written to the destination.
        TransferFailed: A storage error during the copy; every partial copy was removed.
    """
    _check_names(study_name, to_study_name)
    if _storage_identity(from_url) == _storage_identity(to_url):
        raise TransferError(f"--from and --to are the same storage ({mask_url(to_url)})")
    opened: list[optuna.storages.RDBStorage] = []
    try:
        source = _open_source(from_url)
        opened.append(source)
        try:
            name = choose_study(source, from_url, study_name)
        except UsageError as e:
            raise TransferError(str(e)) from None
        target = to_study_name or name
        pairs = [(name, target)]
        sibling = confirm_study_name(name)
        skipped: tuple[str, ...] = ()
        if not name.endswith(CONFIRM_SUFFIX) and _has_study(source, sibling):
            if with_confirm:
                pairs.append((sibling, confirm_study_name(target)))
            else:
                skipped = (sibling,)
        snapshots = []
        for source_name, _ in pairs:
            try:
                snapshots.append(_read(source, source_name))
            except Exception as e:
                raise TransferFailed(
                    f"cannot read study {source_name!r} from {mask_url(from_url)}: {redact(first_line(e), from_url)}"
                ) from e
        if len(pairs) > 1 and target != name:
            # search.confirm finds its runs by the name of the study they confirm.
            snapshots[1].user_attrs["source_study"] = target
        dest_path = _sqlite_file(to_url)
        created_file = dest_path if dest_path is not None and not os.path.exists(dest_path) else None
        dest = _open(to_url, "destination")
        opened.append(dest)
        written: list[str] = []
        try:
            there = {s.study_name for s in dest.get_all_studies()}
            existing = [t for _, t in pairs if t in there]
            if existing and not overwrite:  # Checked for every study before anything is written.
                raise TransferError(
                    f"study {existing[0]!r} already exists in {mask_url(to_url)} (use --overwrite to replace it)"
                )
            reports = []
            for (source_name, dest_name), snapshot in zip(pairs, snapshots):
                exists = dest_name in there
                if exists:
                    dest.delete_study(dest.get_study_id_from_name(dest_name))
                written.append(dest_name)
                remapped, dropped = _copy(snapshot, source_name, dest, dest_name)
                mismatches = _verify(snapshot, remapped, dest, dest_name)
                reports.append(
                    _report(snapshot, source_name, dest_name, from_url, to_url, remapped, dropped, exists, mismatches)
                )
        except TransferError:
            raise  # The study was there before: nothing was written.
        except optuna.exceptions.DuplicatedStudyError:
            # Created by someone else since the check above: theirs, not ours to remove.
            written.pop()
            for dest_name in written:
                _discard(dest, dest_name, None)
            raise TransferError(f"study {pairs[len(written)][1]!r} was just created in {mask_url(to_url)} by another process")
        except BaseException as e:
            for dest_name in written:
                _discard(dest, dest_name, None)
            _discard_file(dest, created_file)
            if isinstance(e, Exception):
                raise TransferFailed(
                    f"copy to {mask_url(to_url)} failed (the partial copy was removed): "
                    + redact(first_line(e), to_url)
                ) from e
            raise
    finally:
        for storage in opened:  # Closing every connection removes SQLite's -wal/-shm files.
            close_storage(storage)
    return dataclasses.replace(reports[0], siblings=tuple(reports[1:]), skipped=skipped)


def _has_study(storage: optuna.storages.BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _report(
    snapshot: _Snapshot,
    name: str,
    target: str,
    from_url: str,
    to_url: str,
    remapped: dict[str, Any],
    dropped: list[str],
    overwritten: bool,
    mismatches: list[str],
) -> TransferReport:
    states = Counter(t.state.name for t in snapshot.trials)
    return TransferReport(
        study_name=name,
        to_study_name=target,
        from_url=mask_url(from_url),
        to_url=mask_url(to_url),
        states=dict(sorted(states.items(), key=lambda kv: TrialState[kv[0]].value)),
        running_converted=snapshot.running_converted,
        dashboard_keys_remapped=sum(1 for k in remapped if not _SAMPLER_ID_LIST_KEY.match(k)),
        sampler_keys_remapped=sum(1 for k in remapped if _SAMPLER_ID_LIST_KEY.match(k)),
        dropped_keys=tuple(dropped),
        artifacts=_count_artifacts(snapshot),
        user_attrs=len(snapshot.user_attrs),
        system_attrs=len(snapshot.plain_system_attrs) + len(remapped),
        overwritten=overwritten,
        verified=not mismatches,
        mismatches=tuple(mismatches),
        aligned_distributions=snapshot.aligned,
    )


def _check_names(study_name: str | None, to_study_name: str | None) -> None:
    for flag, value in (("--study-name", study_name), ("--to-study-name", to_study_name)):
        if value is not None and not value.strip():
            raise TransferError(f"{flag} must not be empty")


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (None for other databases, in-memory SQLite, or a bad URL)."""
    try:
        return sqlite_path(url)
    except Exception:
        return None


def _storage_identity(url: str) -> tuple[Any, ...]:
    """What makes two URLs the same database: the file, or the server and database name."""
    try:
        parsed = make_url(url)
    except Exception:
        return ("unparsed", url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = _sqlite_file(url)
        return ("sqlite", os.path.realpath(path)) if path else ("sqlite-memory", url)
    host = (parsed.host or "").lower()
    host = "127.0.0.1" if host in ("localhost", "::1") else host
    return (backend, host, parsed.port or _DEFAULT_PORTS.get(backend), parsed.database)


def _open(url: str, role: str) -> optuna.storages.RDBStorage:
    try:
        return open_storage(url)
    except StorageError as e:
        raise TransferError(f"{role}: {e}") from None


def _open_source(url: str) -> optuna.storages.RDBStorage:
    """Opens the source without creating anything: no file, no tables."""
    try:
        return open_existing_storage(url)
    except StorageError as e:
        raise TransferError(f"source: {e}") from None


def _read(source: optuna.storages.RDBStorage, name: str) -> _Snapshot:
    study_id = source.get_study_id_from_name(name)
    directions = source.get_study_directions(study_id)
    user_attrs = source.get_study_user_attrs(study_id)
    system_attrs = source.get_study_system_attrs(study_id)
    trials = sorted(source.get_all_trials(study_id, deepcopy=True), key=lambda t: t.number)
    now = datetime.datetime.now()
    converted = []
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            trial.state = TrialState.FAIL
            trial.user_attrs = {**trial.user_attrs, FAIL_REASON: RUNNING_FAIL_REASON}
            trial.datetime_complete = now
            converted.append(trial.number)
    plain = {k: v for k, v in system_attrs.items() if not _is_id_keyed(k, v)}
    keyed = {k: v for k, v in system_attrs.items() if _is_id_keyed(k, v)}
    return _Snapshot(directions, user_attrs, plain, keyed, trials, tuple(converted), _align_point_distributions(trials))


def _align_point_distributions(trials: list[FrozenTrial]) -> tuple[int, ...]:
    """Gives one-value distributions (low == high) the log flag of the study's others; returns the trials changed.

    Optuna refuses a parameter whose log flag differs between trials of a study, and
    ``optuna.copy_study`` with it; search.confirm's corner runs wrote one-value distributions
    without the flag before 2026-12-04. A range of one value has no scale, so the flag says nothing there.
    """
    reference: dict[str, Any] = {}
    for trial in trials:
        for name, dist in trial.distributions.items():
            if name not in reference or (_one_value(reference[name]) and not _one_value(dist)):
                reference[name] = dist
    changed = []
    for trial in trials:
        dists = dict(trial.distributions)
        for name, dist in dists.items():
            ref = reference[name]
            if _one_value(dist) and type(dist) is type(ref) and dist.log != ref.log:
                dists[name] = type(dist)(dist.low, dist.high, log=ref.log)
        if dists != trial.distributions:
            trial.distributions = dists
            changed.append(trial.number)
    return tuple(changed)


def _one_value(dist: Any) -> bool:
    return isinstance(dist, (FloatDistribution, IntDistribution)) and dist.low == dist.high


def _is_id_keyed(key: str, value: Any) -> bool:
    if any(pattern.match(key) for pattern in _DASHBOARD_ID_KEYS):
        return True
    return bool(_SAMPLER_ID_LIST_KEY.match(key)) and isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def _copy(
    snapshot: _Snapshot, name: str, dest: optuna.storages.RDBStorage, target: str
) -> tuple[dict[str, Any], list[str]]:
    """Writes the snapshot with ``optuna.copy_study``, then re-keys the trial-id attrs.

    Returns:
        The re-keyed study system attrs as written, and the keys dropped (no such trial).
    """
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # No "A new study created" lines.
    try:
        staged = optuna.storages.InMemoryStorage()
        staged_id = staged.create_new_study(snapshot.directions, name)
        for key, value in snapshot.plain_system_attrs.items():
            staged.set_study_system_attr(staged_id, key, value)
        for key, value in snapshot.user_attrs.items():
            staged.set_study_user_attr(staged_id, key, value)
        for trial in snapshot.trials:
            staged.create_new_trial(staged_id, template_trial=trial)
        optuna.copy_study(from_study_name=name, from_storage=staged, to_storage=dest, to_study_name=target)
    finally:
        optuna.logging.set_verbosity(verbosity)

    dest_id = dest.get_study_id_from_name(target)
    by_number = {t.number: t._trial_id for t in dest.get_all_trials(dest_id, deepcopy=False)}
    id_map = {t._trial_id: by_number[t.number] for t in snapshot.trials if t.number in by_number}
    remapped, dropped = _remap(snapshot.id_keyed_system_attrs, id_map)
    for key, value in remapped.items():
        dest.set_study_system_attr(dest_id, key, value)
    return remapped, dropped


def _remap(attrs: dict[str, Any], id_map: dict[int, int]) -> tuple[dict[str, Any], list[str]]:
    """Re-keys trial-id keyed study system attrs with ``id_map`` (old trial id -> new)."""
    remapped: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in attrs.items():
        if _SAMPLER_ID_LIST_KEY.match(key):
            if all(v in id_map for v in value):
                remapped[key] = [id_map[v] for v in value]
            else:
                dropped.append(key)  # A cache: the sampler recomputes it when missing.
            continue
        match = next(m for m in (p.match(key) for p in _DASHBOARD_ID_KEYS) if m)
        old = int(match.group(1))
        if old not in id_map:
            dropped.append(key)
            continue
        remapped[key[: match.start(1)] + str(id_map[old]) + key[match.end(1) :]] = value
    return remapped, dropped


def _canon(value: Any) -> str:
    # JSON keeps int and float apart, and writes NaN as NaN so that NaN equals NaN.
    return json.dumps(value, sort_keys=True, default=repr)


def _verify(
    snapshot: _Snapshot, remapped: dict[str, Any], dest: optuna.storages.RDBStorage, target: str
) -> list[str]:
    """Compares the copy read back with the snapshot; returns what differs (empty: equal)."""
    dest_id = dest.get_study_id_from_name(target)
    problems: list[str] = []
    if list(dest.get_study_directions(dest_id)) != list(snapshot.directions):
        problems.append("study directions differ")
    if _canon(dest.get_study_user_attrs(dest_id)) != _canon(snapshot.user_attrs):
        problems.append("study user attrs differ")
    wanted_system = {**snapshot.plain_system_attrs, **remapped}
    if _canon(dest.get_study_system_attrs(dest_id)) != _canon(wanted_system):
        problems.append("study system attrs differ")
    copied = {t.number: t for t in dest.get_all_trials(dest_id, deepcopy=False)}
    if len(copied) != len(snapshot.trials):
        problems.append(f"{len(copied)} trials in the copy, {len(snapshot.trials)} in the source")
    for trial in snapshot.trials:
        other = copied.get(trial.number)
        if other is None:
            problems.append(f"trial {trial.number} is missing")
            continue
        for what, a, b in (
            ("state", trial.state.name, other.state.name),
            ("params", trial.params, other.params),
            ("distributions", _distributions(trial), _distributions(other)),
            ("values", trial.values, other.values),
            ("user attrs", trial.user_attrs, other.user_attrs),
            ("system attrs", trial.system_attrs, other.system_attrs),
            ("intermediate values", trial.intermediate_values, other.intermediate_values),
        ):
            if _canon(a) != _canon(b):
                problems.append(f"trial {trial.number}: {what} differ")
    return problems


def _distributions(trial: FrozenTrial) -> dict[str, str]:
    return {k: optuna.distributions.distribution_to_json(d) for k, d in trial.distributions.items()}


def _count_artifacts(snapshot: _Snapshot) -> int:
    keys = [*snapshot.plain_system_attrs, *snapshot.id_keyed_system_attrs]
    keys += [k for t in snapshot.trials for k in t.system_attrs]
    return sum(1 for k in keys if k.startswith(_ARTIFACT_PREFIXES))


def _discard(dest: optuna.storages.RDBStorage, target: str, created_file: str | None) -> None:
    """Removes a partial copy: the study, and the SQLite file if this run created it."""
    with contextlib.suppress(Exception):  # Never created, or the database is gone.
        dest.delete_study(dest.get_study_id_from_name(target))
    _discard_file(dest, created_file)


def _discard_file(dest: optuna.storages.RDBStorage, created_file: str | None) -> None:
    """Removes the destination SQLite file if this run created it."""
    if created_file is not None:
        close_storage(dest)
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.remove(created_file + suffix)


def format_report(report: TransferReport) -> list[str]:
    """The lines ``python -m search.transfer`` prints for ``report`` and its siblings."""
    lines = _format_one(report)
    for sibling in report.siblings:
        lines += _format_one(sibling, along=f" (search.confirm's runs of {report.study_name!r})")
    copied = [report, *report.siblings]
    names = ", ".join(
        repr(r.study_name) + ("" if r.to_study_name == r.study_name else f" as {r.to_study_name!r}") for r in copied
    )
    lines.append(f"studies copied: {names}")
    for name in report.skipped:
        lines.append(f"not copied: {name!r} (--no-confirm): the copy has no confirmation runs")
    return lines


def _format_one(report: TransferReport, along: str = "") -> list[str]:
    counts = ", ".join(f"{state.lower()} {n}" for state, n in report.states.items()) or "none"
    rename = "" if report.to_study_name == report.study_name else f" as {report.to_study_name!r}"
    replaced = " (replaced the study of that name there)" if report.overwritten else ""
    lines = [
        f"copied study {report.study_name!r}{rename}{along}",
        f"  from: {report.from_url}",
        f"  to:   {report.to_url}{replaced}",
        f"  trials: {report.trials} ({counts}); numbers kept, trial ids are new",
    ]
    if report.running_converted:
        numbers = ", ".join(f"#{n}" for n in report.running_converted)
        lines.append(
            f"  running: {len(report.running_converted)} trial(s) RUNNING in the source ({numbers}) "
            "copied as FAIL with fail_reason: no worker would ever finish them in the copy"
        )
    if report.aligned_distributions:
        lines.append(
            f"  distributions: {len(report.aligned_distributions)} trial(s) with one-value ranges written with the "
            "study's log flags (Optuna refuses mixed flags; a one-value range has no scale); values unchanged"
        )
    lines.append(f"  study attrs: {report.user_attrs} user (recorded settings), {report.system_attrs} system")
    remapped = f"{report.dashboard_keys_remapped} dashboard key(s) (trial notes, artifacts)"
    if report.sampler_keys_remapped:
        remapped += f", {report.sampler_keys_remapped} sampler key(s)"
    lines.append(f"  re-keyed to the new trial ids: {remapped}")
    if report.dropped_keys:
        lines.append(f"  not copied: {len(report.dropped_keys)} attr(s) naming no trial of the study")
    if report.artifacts:
        lines.append(
            f"  artifacts: {report.artifacts} record(s) copied; their files stay in the artifact store"
        )
    if report.verified:
        lines.append(
            "  verified: trial count, and per trial number: state, params, values, user and system "
            "attrs, intermediate values; study attrs"
        )
    else:
        lines.append("  NOT verified: " + "; ".join(report.mismatches[:5]))
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.transfer"),
        description="Copy a study, with all trials and attrs, from one Optuna storage to another "
        "(SQLite, PostgreSQL, MySQL) and verify the copy. Trials RUNNING in the source are copied "
        "as FAIL; WAITING trials stay WAITING.",
        allow_abbrev=False,
    )
    p.add_argument("--from", dest="from_url", metavar="URL", required=True, help="source storage URL")
    p.add_argument("--to", dest="to_url", metavar="URL", required=True, help="destination storage URL")
    p.add_argument("--study-name", default=None, help="study to copy [the source's only study]")
    p.add_argument("--to-study-name", default=None, help="its name in the destination [the same]")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a study of that name in the destination"
    )
    p.add_argument(
        "--no-confirm",
        action="store_true",
        help="do not copy the study's search.confirm runs (its sibling study <name>.confirm), "
        "which are copied along by default",
    )
    return p


_ANY_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _clean(text: str, urls: Sequence[str]) -> str:
    """``text`` without the passwords of ``urls`` (or of anything that looks like a URL)."""
    for url in urls:
        if url:
            text = redact(text, url)
    return _ANY_PASSWORD.sub(r"\1***@", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (0 verified copy, 1 failed, 2 bad input, 141 stdout closed)."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    urls: list[str] = []
    try:
        args = build_parser().parse_args(argv)
        urls = [args.from_url, args.to_url]
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with interrupts_as_exceptions():
            report = transfer_study(
                args.from_url, args.to_url, args.study_name, args.to_study_name, args.overwrite, not args.no_confirm
            )
    except Interrupted as e:  # transfer_study removed its partial copy on the way out.
        return _fail(f"interrupted ({e}); nothing was copied (a partial copy was removed)", 128 + e.signum)
    except UsageError as e:  # TransferError, and argparse's and choose_study's errors.
        return _fail(_clean(str(e), urls), 2)
    except TransferFailed as e:
        return _fail(_clean(str(e), urls), 1)
    except Exception as e:  # Unexpected, e.g. a storage error while listing studies.
        return _fail(_clean(f"transfer failed: {first_line(e)}", urls), 1)
    for line in format_report(report):
        print(_clean(line, urls))
    if not report.all_verified:
        return _fail(
            _clean(f"the copy in {report.to_url} differs from the source; rerun with --overwrite", urls), 1
        )
    return 0

def _fail(message: str, code: int) -> int:
    return fail(PROG, message, code)


if __name__ == "__main__":
    sys.exit(main())

"""Copying a study, with its trials and attrs, from one storage to another, and verifying the copy.

:func:`transfer_study` is ``python -m search.transfer``'s work (SQLite, PostgreSQL or MySQL, in any
direction), including the recorded settings that ``search.optimize`` checks on resume. The
destination write is :func:`optuna.copy_study`; around it:

* The source is read once, into an in-memory snapshot (:mod:`search.storage._copy_snapshot`). Everything
  written and verified is that snapshot, so a source that is still running gives a consistent copy.
* A trial RUNNING in the source is copied as FAIL with user attr ``fail_reason``: a RUNNING trial
  in the copy has no worker and no heartbeat, so it would never finish there. WAITING trials
  (the enqueued baselines, retries queued by Optuna's stale-trial callback) stay WAITING.
* Trial *ids* change (every storage numbers its rows itself); trial *numbers* do not. What is
  keyed by trial id in the study's system attrs is re-keyed to the new ids, matched by trial
  number: optuna-dashboard's trial notes (``dashboard:<id>:note_ver``,
  ``dashboard:<id>:note_str:<i>``), its legacy artifact records (``dashboard:artifacts:<id>:<artifact>``)
  and preferential skips (``preference:skip_trial:<id>``), and Optuna's GA samplers' parent caches
  (``<Sampler>:parent:<generation>``, a list of trial ids). ``failed_trial`` and ``retry_history``
  (Optuna's ``RetryHeartbeatStaleTrialCallback``) hold trial numbers and need nothing.
* search.confirm's sibling study ``<study>.confirm`` is copied along (``with_confirm``), as
  ``<target>.confirm`` with its ``source_study`` attr following a rename.
* The copy is read back and compared with the snapshot (:mod:`search.storage._copy_check`); a
  failed copy is removed, with the SQLite file this copy created.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from search.core import CONFIRM_SUFFIX, UsageError
from search.storage._copy_check import verify_copy
from search.storage._copy_snapshot import (
    SAMPLER_ID_LIST_KEY,
    CopySnapshot,
    count_artifacts,
    read_snapshot,
    remap_id_keys,
)
from search.storage._open import (
    StorageError,
    choose_study,
    close_storage,
    open_existing_storage,
    open_storage,
)
from search.storage._optuna_internals import trial_id_of
from search.storage._urls import first_line, mask_url, redact, sqlite_path

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
        sibling = name + CONFIRM_SUFFIX  # results.confirm_study_name: storage sits below results
        skipped: tuple[str, ...] = ()
        if not name.endswith(CONFIRM_SUFFIX) and _has_study(source, sibling):
            if with_confirm:
                pairs.append((sibling, target + CONFIRM_SUFFIX))
            else:
                skipped = (sibling,)
        snapshots = []
        for source_name, _ in pairs:
            try:
                snapshots.append(read_snapshot(source, source_name))
            except Exception as e:
                raise TransferFailed(
                    f"cannot read study {source_name!r} from {mask_url(from_url)}:"
                    f" {redact(first_line(e), from_url)}"
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
                    f"study {existing[0]!r} already exists in {mask_url(to_url)} (use --overwrite to"
                    " replace it)"
                )
            reports = []
            for (source_name, dest_name), snapshot in zip(pairs, snapshots):
                exists = dest_name in there
                if exists:
                    dest.delete_study(dest.get_study_id_from_name(dest_name))
                written.append(dest_name)
                remapped, dropped = _copy(snapshot, source_name, dest, dest_name)
                mismatches = verify_copy(snapshot, remapped, dest, dest_name)
                reports.append(
                    _report(
                        snapshot,
                        source_name,
                        dest_name,
                        from_url,
                        to_url,
                        remapped,
                        dropped,
                        exists,
                        mismatches,
                    )
                )
        except TransferError:
            raise  # The study was there before: nothing was written.
        except optuna.exceptions.DuplicatedStudyError:
            # Created by someone else since the check above: theirs, not ours to remove.
            written.pop()
            for dest_name in written:
                _discard(dest, dest_name, None)
            raise TransferError(
                f"study {pairs[len(written)][1]!r} was just created in {mask_url(to_url)} by another process"
            )
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
    snapshot: CopySnapshot,
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
        dashboard_keys_remapped=sum(1 for k in remapped if not SAMPLER_ID_LIST_KEY.match(k)),
        sampler_keys_remapped=sum(1 for k in remapped if SAMPLER_ID_LIST_KEY.match(k)),
        dropped_keys=tuple(dropped),
        artifacts=count_artifacts(snapshot),
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


def _copy(
    snapshot: CopySnapshot, name: str, dest: optuna.storages.RDBStorage, target: str
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
    by_number = {t.number: trial_id_of(t) for t in dest.get_all_trials(dest_id, deepcopy=False)}
    id_map = {trial_id_of(t): by_number[t.number] for t in snapshot.trials if t.number in by_number}
    remapped, dropped = remap_id_keys(snapshot.id_keyed_system_attrs, id_map)
    for key, value in remapped.items():
        dest.set_study_system_attr(dest_id, key, value)
    return remapped, dropped


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

"""The controller's record of a run: every report, open rounds, committed checkpoints.

The commit protocol (``docs/fault-tolerance.md`` states it with its invariants):

* The i-th ``report()`` of each rank belongs to round i.  A rank's files are
  staged in ``.staging/checkpoint_<i>/`` before its report reaches here.
* A round commits when every rank expected to report it has (the ranks that
  report, learned from the reports themselves: see ``policies``).  There is
  no clock: a slow rank delays its rounds' commits, never makes one commit
  without it.  Rounds commit in order; a committed folder is never changed.
* After a failure, an open round commits only if it is whole; the rest are
  dropped (their staged files removed).  Each attempt starts with an empty
  staging area, so no file of a dead attempt is ever published.

Reports arrive from worker reader threads; the manager is thread-safe and
keeps everything in memory as well as in the run folder (``result.json``
holds every report of every rank, so no metric is ever dropped).
"""

from __future__ import annotations

import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.observe.recorder import OWN_RUN_KEYS
from muster.train._internal import policies, resume
from muster.train._internal.policies import CheckpointRecord
from muster.train.config import CheckpointConfig
from muster.train.storage import Storage

# A report's metrics may carry, under SHOWN_ITERATION, the ``training_iteration`` to record instead
# of its round (Tune's count restarts with the checkpoint a trial restores, as Ray's does); the
# round, which names checkpoint folders and only grows, is then kept in the row under ROUND.
SHOWN_ITERATION = "_shown_iteration"
ROUND = "_round"
# The keys the manager writes into each row (Tune's results show them, Ray Train V2's do not); a
# report that carried one of its own keeps the reported values in the row under OWN_RUN_KEYS, so a
# training run's result shows them as reported.
RUN_KEYS = ("training_iteration", "timestamp", "checkpoint_dir_name")


def round_of(row: dict[str, Any]) -> int:
    """The round of a recorded row (its ``training_iteration`` unless Tune showed another)."""
    return int(row.get(ROUND, row.get("training_iteration", 0)))


_FLUSH_EVERY_S = 2.0  # how often result.json is appended to (commits flush at once)


@dataclass
class _OpenRound:
    files: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)  # rank -> {relpath: meta}
    states: dict[int, bytes] = field(default_factory=dict)  # rank -> resume state
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its result.json row
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> what it passed to report()
    validation: Any = None  # report(validation=...) of a rank, as sent: True or a ValidationTaskConfig's fields


class CheckpointManager:
    def __init__(
        self,
        storage: Storage,
        checkpoint_config: CheckpointConfig,
        on_commit: Callable[[CheckpointRecord], None] | None = None,
        warn: Callable[[str], None] | None = None,
        on_round: Callable[[int, dict[int, dict[str, Any]], CheckpointRecord | None, Any], None] | None = None,
    ):
        """``on_commit(record)``: a checkpoint was committed. ``on_round(round, metrics by rank,
        record or None, validation)``: a round was decided whole (after its commit, if it had
        files; ``validation``: what a rank passed as ``report(validation=)``, or None); rounds
        dropped after a failure are not announced."""
        self.storage = storage
        self.config = checkpoint_config
        self.reports: list[dict[str, Any]] = []
        self.committed: list[CheckpointRecord] = []
        self._open: dict[int, _OpenRound] = {}
        self._closed: set[int] = set()  # rounds decided in this driver (committed or not)
        self._reporters: frozenset[int] | None = None  # the ranks that report, once known
        self._reporters_world = 0  # the world size ``_reporters`` was learned at
        self._last: dict[int, int] = {}  # rank -> its latest round recorded in this attempt
        self._announced: dict[int, int] = {}  # rank -> its latest round begun (report() entered)
        self._finished: dict[int, int] = {}  # rank -> its last round; it finished its loop
        self._warned_behind: set[int] = set()
        self._newest_round = 0
        self._start_round = 0
        self._world_size = 1
        self._unsound: set[int] = set()
        self._lock = threading.RLock()
        self._on_commit = on_commit
        self._on_round = on_round
        self.pending_validation: dict[int, Any] = {}  # round -> its validation (kept from retention until done)
        self._validated: set[int] = set()  # rounds whose validation outcome is stored beside them
        self._held: dict[int, int] = {}  # round -> how many copies of its checkpoint are under way (see holding)
        self._warn = warn or (lambda message: warnings.warn(message, stacklevel=4))
        self._rows: list[str | dict[str, Any]] = []  # result.json lines; dicts are serialised when written
        self._written = 0  # how many of ``_rows`` are in result.json
        self._last_flush = time.monotonic()
        self._said_unscored = False  # whether a checkpoint without the score attribute was warned of

    # -- loading a previous run ------------------------------------------------
    def load_previous(self) -> None:
        """Take in the reports and checkpoints of earlier drivers of this run."""
        for line in self.storage.read_results():
            self._rows.append(line)
            self.reports.append(self.storage.parse_result(line))
        self._written = len(self._rows)
        manifest: dict[str, Any] = {}
        recorded = {round_of(row) for row in self.reports}
        for r in self.storage.committed_rounds():
            manifest = self.storage.read_manifest(self.storage.checkpoint_dir(r))
            if r not in recorded:
                self._recover_rows(r, manifest)
            metrics, status = self.storage.checkpoint_metrics(r, manifest)
            self.committed.append(CheckpointRecord(r, self.storage.checkpoint_dir(r), metrics))
            if status == "PENDING_VALIDATION":  # the driver stopped before it ended: validate it again
                self.pending_validation[r] = manifest["validation"]
            elif status != "COMMITTED":
                self._validated.add(r)
        if manifest.get("reporters") is not None:
            self._reporters = frozenset(manifest["reporters"])
            self._reporters_world = int(manifest.get("world_size", 0))
        rounds = [round_of(r) for r in self.reports] + [c.round for c in self.committed]
        self._newest_round = max(rounds + [0])
        self.flush()

    def _recover_rows(self, r: int, manifest: dict[str, Any]) -> None:
        """A round whose checkpoint was committed but whose rows never reached ``result.json``: the
        driver died between the two (the commit comes first, so that every row names its checkpoint).
        Its rows are taken back from the manifest, which holds them, else the step would be missing
        from the record, as the run resumes after that checkpoint."""
        name = self.storage.checkpoint_dir(r).rstrip("/").rsplit("/", 1)[-1]
        for row in manifest.get("rows") or [manifest.get("metrics", {})]:
            row = {**row, "checkpoint_dir_name": name}
            self._rows.append(row)
            self.reports.append(row)

    # -- during an attempt -------------------------------------------------------
    def start_attempt(self, world_size: int) -> int:
        """Reset per-attempt state and clear the staging area (every worker of the last
        attempt is gone); return the round number the workers continue from."""
        with self._lock:
            self._world_size = world_size
            self._open.clear()
            self._last.clear()
            self._announced.clear()
            self._finished.clear()
            self._warned_behind.clear()
            if self._reporters_world != world_size:  # learned for another gang size: learn again
                self._reporters = None
            self.storage.clear_staging()
            self._start_round = self._newest_round
            return self._newest_round

    def record(self, rank: int, round_: int, metrics: dict[str, Any], files: dict[str, dict[str, int]] | None,
               t: float, attempt: int, state: bytes | None = None, validation: Any = None) -> dict[str, Any]:
        """Take in one report; commit every round that is now whole. Returns the stored row.
        ``validation``: what the rank passed as ``report(validation=...)`` (None: nothing)."""
        with self._lock:
            row = dict(metrics)
            shown = row.pop(SHOWN_ITERATION, None)
            own = {k: row[k] for k in RUN_KEYS if k in row}
            row.update(
                {"training_iteration": round_, "timestamp": t, "_rank": rank, "_attempt": attempt,
                 "checkpoint_dir_name": None}
            )
            if shown is not None and shown != round_:  # Tune's count (Ray's): the round is kept too
                row["training_iteration"], row[ROUND] = shown, round_
            if own:
                row[OWN_RUN_KEYS] = own
            self.reports.append(row)
            self._rows.append(row)
            self._newest_round = max(self._newest_round, round_)
            self._last[rank] = max(self._last.get(rank, 0), round_)
            self._announced[rank] = max(self._announced.get(rank, 0), round_)
            if round_ in self._closed:
                self._late(round_, rank, files)
            else:
                rnd = self._open.setdefault(round_, _OpenRound())
                rnd.rows[rank] = row
                rnd.metrics[rank] = metrics if shown is None else {k: v for k, v in metrics.items()
                                                                   if k != SHOWN_ITERATION}
                if files is not None:
                    rnd.files[rank] = files
                if state is not None:
                    rnd.states[rank] = state
                if validation is not None:
                    rnd.validation = validation
            self._settle()
            self._commit_ready()
            self._warn_if_behind()
            if time.monotonic() - self._last_flush > _FLUSH_EVERY_S:
                self.flush()
            return row

    def announce(self, rank: int, round_: int) -> None:
        """``rank`` entered ``report()`` for ``round_``; its files may take a while to arrive.
        Only who reports is learned from this: no round commits before its ``record``."""
        with self._lock:
            self._announced[rank] = max(self._announced.get(rank, 0), round_)
            self._settle()
            self._commit_ready()

    def checkpoint_pending(self, round_: int) -> bool:
        """Whether a rank reported a checkpoint for ``round_``, and the round is not decided yet."""
        with self._lock:
            rnd = self._open.get(round_)
            return rnd is not None and bool(rnd.files)

    def rank_finished(self, rank: int) -> None:
        """``rank``'s loop returned: it reports nothing more, so no round waits for it."""
        with self._lock:
            self._finished[rank] = self._last.get(rank, self._start_round)
            self._settle()
            self._commit_ready()

    def _settle(self) -> None:
        if self._reporters is not None:
            unexpected = set(self._announced) - self._reporters
            if not unexpected:
                return
            self._reporters = self._reporters | unexpected  # they do report: wait for them from now on
            return
        settled = policies.settle_reporters(
            self._world_size, self._announced, self._start_round, set(self._finished)
        )
        if settled is not None:
            self._reporters, self._reporters_world = settled, self._world_size

    def _commit_ready(self) -> None:
        for r in sorted(self._open):
            if not policies.round_ready(set(self._open[r].rows), self._world_size, self._reporters, r, self._finished):
                break  # rounds commit in order
            self._close(r)

    def _warn_if_behind(self) -> None:
        if self._reporters is None:
            return
        # Only a checkpoint can wait on a rank: ranks running apart with none to commit (a loop
        # with no collective between its reports) lose nothing, and are not worth a warning.
        saved = [r for r, rnd in self._open.items() if rnd.files]
        for rank in policies.behind(self._last, self._reporters, self._start_round):
            if rank in self._warned_behind or rank in self._finished:
                continue
            if not any(r > self._last.get(rank, self._start_round) for r in saved):
                continue
            self._warned_behind.add(rank)
            lead = max(self._last.values())
            self._warn(
                f"Rank {rank} is {lead - self._last.get(rank, self._start_round)} rounds behind: it last "
                f"reported round {self._last.get(rank, self._start_round)}, another rank reported round {lead}. "
                "Checkpoints of later rounds commit only once it reports them (a round is never committed "
                "without a rank that reports). A slow save or disk, or no collective between report() calls?"
            )

    def close_all(self, complete: bool) -> None:
        """End of an attempt, every worker gone. ``complete``: every worker finished its loop,
        so every open round is whole. After a failure, a round commits only if every rank
        expected to report it did (a partial sharded checkpoint would not load, and a rank
        without its resume state would not resume exactly); the others are dropped."""
        with self._lock:
            if complete:
                for rank in range(self._world_size):
                    self._finished.setdefault(rank, self._last.get(rank, self._start_round))
                self._settle()
            silent_rounds: list[int] = []
            silent_ranks: set[int] = set()
            for r in sorted(self._open):
                rnd = self._open[r]
                if complete or policies.round_ready(
                    set(rnd.rows), self._world_size, self._reporters, r, self._finished
                ):
                    self._close(r)
                    continue
                self._open.pop(r)
                self._closed.add(r)
                if not rnd.files:
                    continue
                missing = sorted(
                    policies.expected_reporters(self._world_size, self._reporters, self._finished, r)
                    - set(rnd.rows)
                )
                if self._reporters is None and not set(missing) & set(self._announced):
                    silent_rounds.append(r)  # they never reported: perhaps they never do
                    silent_ranks.update(missing)
                    continue
                self._warn(
                    f"Checkpoint round {r} was not committed: rank(s) {missing} failed before reporting "
                    "it. Training resumes from the previous checkpoint."
                )
            if silent_rounds:
                self._warn_silent(silent_rounds, sorted(silent_ranks))
            self.storage.clear_staging()
            self.flush()

    def _warn_silent(self, rounds: list[int], ranks: list[int]) -> None:
        """Rounds dropped at a failure because some ranks had not called ``report()`` once in the
        attempt: muster could not yet tell them from ranks that never report."""
        self._warn(
            f"Checkpoint round(s) {rounds} were not committed: rank(s) {ranks} had not called report() in this "
            "attempt when it ended, so they could not yet be told from ranks that never report (that is "
            f"learned once another rank is more than {policies.SILENT_ROUNDS} rounds ahead, or when their loop "
            "returns). Training resumes from the previous checkpoint. With the `if rank == 0: report(...)` "
            "pattern, call train.report(metrics) on every rank instead (only rank 0 passing checkpoint=...): "
            "each round then commits as soon as it is reported, as Ray requires."
        )

    def _close(self, r: int) -> None:
        rnd = self._open.pop(r)
        self._closed.add(r)
        record = self._commit(r, rnd) if rnd.files else None
        if self._on_round is not None:
            self._on_round(r, rnd.metrics, record, rnd.validation if record is not None else None)

    def _commit(self, r: int, rnd: _OpenRound) -> CheckpointRecord:
        lead = min(rnd.rows)
        metrics = _without_checkpoint_name(rnd.rows[lead])
        merged = _merge_files(rnd.files, r, self._warn)
        staged = self.storage.staging_dir(r)
        for rank, state in rnd.states.items():
            rel = resume.state_file(rank)
            self.storage.write_bytes(self.storage.join(staged, rel), state)
            merged[rel] = {"size": len(state), "crc32": zlib.crc32(state), "rank": rank}
        manifest = {
            "round": r,
            "committed_at": time.time(),
            "ranks": sorted(rnd.rows),
            "reporters": sorted(self._reporters) if self._reporters is not None else None,
            "world_size": self._world_size,
            "metrics": metrics,
            # every rank's row, for the rare driver that dies before it appends them to result.json
            "rows": [_without_checkpoint_name(rnd.rows[rank]) for rank in sorted(rnd.rows)],
            "files": merged,
            "validation": rnd.validation,
        }
        path = self.storage.commit(r, manifest)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        for row in rnd.rows.values():
            row["checkpoint_dir_name"] = name
        record = CheckpointRecord(r, path, metrics)
        self.committed.append(record)
        self._warn_if_unscored(record, name, rnd.validation is not None)
        if rnd.validation is not None:
            self.pending_validation[r] = rnd.validation
        self._apply_retention()
        self.flush()
        if self._on_commit is not None:
            self._on_commit(record)
        return record

    def _warn_if_unscored(self, record: CheckpointRecord, name: str, validating: bool) -> None:
        """Say once per run that a checkpoint came without the score retention ranks by (Ray logs it as an
        error); a validated checkpoint's score may come from its validation instead."""
        attribute = self.config.checkpoint_score_attribute
        if attribute is None or validating or self._said_unscored or policies.score_of(record, attribute) is not None:
            return
        self._said_unscored = True
        keys = sorted(k for k in record.metrics if not k.startswith("_"))
        self._warn(
            f"{name} was reported without {attribute!r}, the CheckpointConfig(checkpoint_score_attribute="
            f"{attribute!r}) it is ranked by: it ranks last, so retention removes it first. Its report's keys are "
            f"{keys}; report {attribute!r} with every checkpoint (said once per run)."
        )

    def _late(self, r: int, rank: int, files: dict[str, dict[str, int]] | None) -> None:
        """A report for a round already decided: its rank was taken for one that does not
        report (it had reported nothing for several rounds). The committed folder is never
        changed: its files are dropped."""
        if files:
            self.storage.rm(self.storage.staging_dir(r))
        self._warn(
            f"Rank {rank} reported round {r} after that round was decided without it (it had reported "
            f"nothing while another rank went {policies.SILENT_ROUNDS} rounds ahead, so it was taken for a rank "
            "that never reports). " + ("Its files for that round were dropped; " if files else "")
            + "later rounds wait for it. Call report() at the same point of every step on every rank."
        )

    def validated(self, round_: int, metrics: dict[str, Any], status: str) -> None:
        """A validation ended: keep its outcome beside the checkpoint, merge its metrics into the
        checkpoint's (they rank it from now on), and apply retention again."""
        with self._lock:
            self.pending_validation.pop(round_, None)
            record = next((c for c in self.committed if c.round == round_), None)
            if record is None:
                return
            self.storage.write_json(self.storage.validation_path(round_), {"status": status, "metrics": metrics})
            self._validated.add(round_)
            record.metrics.update(metrics)
            self._apply_retention()

    def _apply_retention(self) -> None:
        doomed = policies.to_delete(
            self.committed,
            self.config.num_to_keep,
            self.config.checkpoint_score_attribute,
            self.config.checkpoint_score_order,
        )
        for record in doomed:
            if record.round in self.pending_validation:
                continue  # kept until its validation ends: its score may not be known yet
            if record.round in self._held:
                continue  # being copied (PBT clones it): removed once the copy is done
            self.storage.rm(record.path)
            if record.round in self._validated:
                self._validated.discard(record.round)
                self.storage.rm(self.storage.validation_path(record.round))
            self.committed.remove(record)

    @contextmanager
    def holding(self, path: str) -> Iterator[bool]:
        """Keep the committed checkpoint at ``path`` from retention while the block runs: another
        run copies it (PBT's exploit) while this one goes on committing. Yields whether ``path`` is
        one of this run's committed checkpoints (if not, nothing is held: it may be gone already).
        Retention it was kept from is applied when the last hold on it ends."""
        with self._lock:
            record = next((r for r in self.committed if _same_folder(r.path, path)), None)
            if record is not None:
                self._held[record.round] = self._held.get(record.round, 0) + 1
        try:
            yield record is not None
        finally:
            if record is not None:
                with self._lock:
                    self._held[record.round] -= 1
                    if not self._held[record.round]:
                        del self._held[record.round]
                        self._apply_retention()

    # -- queries -----------------------------------------------------------------
    @property
    def latest(self) -> CheckpointRecord | None:
        with self._lock:
            sound = [r for r in self.committed if r.round not in self._unsound]
            return max(sound, key=lambda r: r.round) if sound else None

    def latest_sound(self, warn: Callable[[str], None]) -> CheckpointRecord | None:
        """The newest committed checkpoint that passes verification (sizes and checksums).

        A checkpoint that fails is reported through ``warn``, kept on disk for
        inspection, and skipped; the one before it is tried next.
        """
        with self._lock:
            candidates = sorted(self.committed, key=lambda r: -r.round)
        for record in candidates:
            if record.round in self._unsound:
                continue
            problems = self.storage.verify(record.path)
            if not problems:
                return record
            self._unsound.add(record.round)
            warn(
                f"checkpoint {record.path} failed verification ({'; '.join(problems[:3])}); "
                "skipping it and trying the one before."
            )
        return None

    def best(self) -> list[CheckpointRecord]:
        with self._lock:
            return policies.rank_best(
                [r for r in self.committed if r.round not in self._unsound],
                self.config.checkpoint_score_attribute,
                self.config.checkpoint_score_order,
            )

    def flush(self) -> None:
        """Write the reports not yet in ``result.json``, in order, up to the first one whose
        round is still open (so every written row already names its checkpoint)."""
        with self._lock:
            end = self._written
            while end < len(self._rows):
                row = self._rows[end]
                if isinstance(row, dict) and round_of(row) in self._open:
                    break
                end += 1
            if end > self._written:
                self.storage.append_results(self._rows[self._written : end], self._rows[:end])
                self._written = end
            self._last_flush = time.monotonic()


def _without_checkpoint_name(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "checkpoint_dir_name"}


def _same_folder(a: str, b: str) -> bool:
    return a.replace("\\", "/").rstrip("/") == b.replace("\\", "/").rstrip("/")


def _merge_files(
    per_rank: dict[int, dict[str, dict[str, int]]], round_: int, warn: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for rank in sorted(per_rank):
        for rel, meta in per_rank[rank].items():
            if rel in merged and merged[rel].get("crc32") != meta["crc32"]:
                warn(
                    f"Checkpoint round {round_}: ranks {merged[rel]['rank']} and {rank} both wrote {rel!r} "
                    "with different contents; whichever finished last was kept. Save from one rank, or "
                    "give each rank's files their own names (e.g. f'shard_{rank}.pt')."
                )
                merged[rel] = {"rank": "several"}  # unknown which copy won: no size/checksum to verify
                continue
            merged.setdefault(rel, {**meta, "rank": rank})
    return merged

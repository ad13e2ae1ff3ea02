"""The controller's record of a run: every report, open rounds, committed checkpoints.

Reports arrive from worker reader threads; the ledger is thread-safe and
keeps everything in memory as well as in the run folder (``result.json``
holds every report of every rank, so no metric is ever dropped).
"""

from __future__ import annotations

import json
import threading
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.train._internal import policies, resume
from muster.train._internal.policies import CheckpointRecord
from muster.train.config import CheckpointConfig
from muster.train.storage import MANIFEST, RESULTS, Storage

_FLUSH_EVERY_S = 2.0


@dataclass
class _OpenRound:
    files: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)  # rank -> {relpath: meta}
    states: dict[int, bytes] = field(default_factory=dict)  # rank -> resume state
    opened: float = field(default_factory=time.monotonic)
    reported: set[int] = field(default_factory=set)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)


class Ledger:
    def __init__(
        self,
        storage: Storage,
        checkpoint_config: CheckpointConfig,
        on_commit: Callable[[CheckpointRecord], None] | None = None,
    ):
        self.storage = storage
        self.config = checkpoint_config
        self.reports: list[dict[str, Any]] = []
        self.committed: list[CheckpointRecord] = []
        self._open: dict[int, _OpenRound] = {}
        self._usual_reporters: frozenset[int] | None = None
        self._file_ranks: frozenset[int] | None = None
        self._newest_round = 0
        self._world_size = 1
        self._closed: dict[int, bool] = {}  # round -> closed with files (committed)
        self._unsound: set[int] = set()
        self._lock = threading.RLock()
        self._on_commit = on_commit
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._results_lines: list[str | dict[str, Any]] = []  # rows are serialised when flushed

    # -- loading a previous run ------------------------------------------------
    def load_previous(self) -> None:
        """Take in the reports and checkpoints of earlier drivers of this run."""
        path = self.storage.join(self.storage.run_dir, RESULTS)
        if self.storage.exists(path):
            with self.storage.fs.open(path, "r") as f:
                for line in f:
                    if line.strip():
                        self._results_lines.append(line.rstrip("\n"))
                        self.reports.append(json.loads(line))
        for r in self.storage.committed_rounds():
            manifest = self.storage.read_json(self.storage.join(self.storage.checkpoint_dir(r), ".muster_manifest.json"))
            self.committed.append(CheckpointRecord(r, self.storage.checkpoint_dir(r), manifest.get("metrics", {})))
        self._newest_round = max([r.get("training_iteration", 0) for r in self.reports] + [0])

    # -- during an attempt -------------------------------------------------------
    def start_attempt(self, world_size: int) -> int:
        """Reset per-attempt state; return the round number the workers continue from."""
        with self._lock:
            self._world_size = world_size
            self._open.clear()
            self._usual_reporters = None
            return self._newest_round

    def record(self, rank: int, round_: int, metrics: dict[str, Any], files: dict[str, dict[str, int]] | None,
               t: float, attempt: int, state: bytes | None = None) -> dict[str, Any]:
        """Take in one report; close any round that is now complete. Returns the stored row."""
        with self._lock:
            row = dict(metrics)
            row.update(
                {
                    "training_iteration": round_,
                    "timestamp": t,
                    "_rank": rank,
                    "_attempt": attempt,
                    "checkpoint_dir_name": None,
                }
            )
            self.reports.append(row)
            self._results_lines.append(row)  # serialised at flush, once checkpoint_dir_name is known
            self._unflushed += 1
            self._newest_round = max(self._newest_round, round_)
            if round_ in self._closed:
                self._late(round_, rank, row, files, state)
                return row
            rnd = self._open.setdefault(round_, _OpenRound())
            rnd.reported.add(rank)
            rnd.metrics[rank] = row
            if files is not None:
                rnd.files[rank] = files
            if state is not None:
                rnd.states[rank] = state
            self._close_ready()
            if time.monotonic() - self._last_flush > _FLUSH_EVERY_S:
                self.flush()
            return row

    def tick(self) -> None:
        """Close rounds that became ready with time alone (the controller calls this often)."""
        with self._lock:
            self._close_ready()

    def _close_ready(self) -> None:
        now = time.monotonic()
        for r in sorted(self._open):
            rnd = self._open[r]
            if policies.round_ready(
                rnd.reported, self._world_size, self._usual_reporters, self._newest_round, r, now - rnd.opened
            ):
                self._close(r, final=False)

    def close_all(self, complete: bool) -> None:
        """End of an attempt. ``complete``: every worker finished its loop, so
        every open round is whole.  After a failure, a round is committed only
        if every rank that reported the previous round reported this one too
        (so every rank's files and resume state are in it: a partial sharded
        checkpoint would not load, and a rank without its state would not
        resume exactly); a round whose reporters are not known yet is
        committed with what arrived, as every ``report()`` that returned must
        survive."""
        with self._lock:
            for r in sorted(self._open):
                rnd = self._open[r]
                expected = (self._usual_reporters or frozenset()) | (self._file_ranks or frozenset())
                if rnd.files and not complete and not expected <= rnd.reported:
                    missing = sorted(expected - rnd.reported)
                    warnings.warn(
                        f"Checkpoint round {r} was not committed: rank(s) {missing} failed before reporting "
                        "it. Training resumes from the previous checkpoint.",
                        stacklevel=2,
                    )
                    self.storage.rm(self.storage.staging_dir(r))
                    self._open.pop(r)
                    continue
                self._close(r, final=True)
            self.flush()

    def _close(self, r: int, final: bool) -> None:
        rnd = self._open.pop(r)
        self._closed[r] = bool(rnd.files)
        if not final or len(rnd.reported) >= self._world_size:
            self._usual_reporters = frozenset(rnd.reported)
        if not rnd.files:
            return
        self._file_ranks = frozenset(rnd.files)
        lead = min(rnd.metrics)
        metrics = {k: v for k, v in rnd.metrics[lead].items() if k != "checkpoint_dir_name"}
        merged = _merge_files(rnd.files, r)
        staged = self.storage.staging_dir(r)
        for rank, state in rnd.states.items():
            rel = resume.state_file(rank)
            self.storage.write_bytes(self.storage.join(staged, rel), state)
            merged[rel] = {"size": len(state), "crc32": zlib.crc32(state), "rank": rank}
        manifest = {
            "round": r,
            "committed_at": time.time(),
            "ranks": sorted(rnd.files),
            "metrics": metrics,
            "files": merged,
        }
        path = self.storage.commit(r, manifest)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        for row in rnd.metrics.values():
            row["checkpoint_dir_name"] = name
        record = CheckpointRecord(r, path, metrics)
        self.committed.append(record)
        self._apply_retention()
        self.flush()
        if self._on_commit is not None:
            self._on_commit(record)

    def _late(self, r: int, rank: int, row: dict[str, Any], files: dict[str, dict[str, int]] | None,
              state: bytes | None) -> None:
        """A report for a round already closed: its rank ran out of step with the others
        (no collective between their reports). Add its files to that round's checkpoint;
        never commit the round again, which would replace the files already there."""
        self._usual_reporters = (self._usual_reporters or frozenset()) | {rank}  # it does report
        record = next((c for c in self.committed if c.round == r), None)
        staged = self.storage.staging_dir(r)
        if record is None and files and not self._closed[r]:
            # The round closed before any rank passed files: commit this rank's now.
            rnd = _OpenRound(reported={rank}, metrics={rank: row}, files={rank: files})
            if state is not None:
                rnd.states[rank] = state
            self._open[r] = rnd
            self._close(r, final=True)
            return
        if record is None:
            if files:
                warnings.warn(
                    f"Rank {rank} reported checkpoint round {r} after that round's checkpoint was committed and "
                    "then removed by CheckpointConfig(num_to_keep=...); this rank's files were dropped. Call "
                    "report() at the same point of every step on every rank.",
                    stacklevel=3,
                )
                self.storage.rm(staged)
            return
        name = record.path.rstrip("/").rsplit("/", 1)[-1]
        row["checkpoint_dir_name"] = name
        if files is None:
            return
        manifest_path = self.storage.join(record.path, MANIFEST)
        manifest = self.storage.read_json(manifest_path)
        for rel, meta in files.items():
            src, dst = self.storage.join(staged, rel), self.storage.join(record.path, rel)
            if self.storage.exists(src):  # else it was written straight into the renamed folder
                self.storage.fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
                self.storage.fs.mv(src, dst)
            manifest["files"][rel] = {**meta, "rank": rank}
        if state is not None:
            rel = resume.state_file(rank)
            self.storage.write_bytes(self.storage.join(record.path, rel), state)
            manifest["files"][rel] = {"size": len(state), "crc32": zlib.crc32(state), "rank": rank}
        manifest["ranks"] = sorted(set(manifest.get("ranks", [])) | {rank})
        self.storage.write_json(manifest_path, manifest)
        self.storage.rm(staged)
        self.flush()
        warnings.warn(
            f"Rank {rank} reported checkpoint round {r} after {name} was committed without it: the ranks "
            "are out of step (no collective between their report() calls?). Its files were added to "
            f"{name}. Report at the same point of every step on every rank to commit each round whole.",
            stacklevel=3,
        )

    def _apply_retention(self) -> None:
        doomed = policies.to_delete(
            self.committed,
            self.config.num_to_keep,
            self.config.checkpoint_score_attribute,
            self.config.checkpoint_score_order,
        )
        for record in doomed:
            self.storage.rm(record.path)
            self.committed.remove(record)

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
        """Write reports not yet in ``result.json`` (append locally, rewrite on object stores)."""
        with self._lock:
            if not self._unflushed:
                return
            path = self.storage.join(self.storage.run_dir, RESULTS)
            if self.storage.is_local:
                self.storage.makedirs(self.storage.run_dir)
                new = self._results_lines[len(self._results_lines) - self._unflushed :]
                with open(path, "a") as f:
                    f.write("".join(_line(line) + "\n" for line in new))
            else:
                self.storage.write_text(path, "".join(_line(line) + "\n" for line in self._results_lines))
            self._unflushed = 0
            self._last_flush = time.monotonic()

def _line(entry: str | dict[str, Any]) -> str:
    return entry if isinstance(entry, str) else json.dumps(entry, default=str)


def _merge_files(per_rank: dict[int, dict[str, dict[str, int]]], round_: int) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for rank in sorted(per_rank):
        for rel, meta in per_rank[rank].items():
            if rel in merged and merged[rel].get("crc32") != meta["crc32"]:
                warnings.warn(
                    f"Checkpoint round {round_}: ranks {merged[rel]['rank']} and {rank} both wrote {rel!r} "
                    "with different contents; whichever finished last was kept. Save from one rank, or "
                    "give each rank's files their own names (e.g. f'shard_{rank}.pt').",
                    stacklevel=3,
                )
                merged[rel] = {"rank": "several"}  # unknown which copy won: no size/checksum to verify
                continue
            merged.setdefault(rel, {**meta, "rank": rank})
    return merged

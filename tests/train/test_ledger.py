"""The controller's ledger on a real run folder: when rounds commit, late reports, retention, result.json.

These drive the ledger directly (the order of reports is fixed here, where
real workers would race), with the session's own staging step.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

from muster.train import CheckpointConfig
from muster.train._internal.ledger import Ledger
from muster.train.storage import MANIFEST, RESULTS, Storage


@pytest.fixture
def run(tmp_path):
    storage = Storage(str(tmp_path / "results"), "run")
    storage.makedirs(storage.run_dir)
    return storage


def make_ledger(storage, world_size=2, **checkpoint_kwargs):
    ledger = Ledger(storage, CheckpointConfig(**checkpoint_kwargs))
    ledger.load_previous()
    assert ledger.start_attempt(world_size) == 0
    return ledger


def report(ledger, storage, tmp_path, rank, round_, files=None, **metrics):
    """What a worker's report() does: stage this rank's files, then hand the report over."""
    staged = None
    if files is not None:
        src = tmp_path / f"src_r{round_}_k{rank}"
        src.mkdir()
        for name, body in files.items():
            (src / name).write_bytes(body)
        staged = storage.upload_dir(str(src), storage.staging_dir(round_))
    return ledger.record(rank, round_, {"rank": rank, **metrics}, staged, 0.0, 0)


def let_time_pass(ledger, seconds=10.0):
    """As if ``seconds`` went by with no report: every open round is that much older."""
    for rnd in ledger._open.values():
        rnd.opened -= seconds
    ledger.tick()


def ckpt_files(storage, round_):
    folder = storage.checkpoint_dir(round_)
    return sorted(n for n in os.listdir(folder) if n != ".muster")


def result_rows(storage):
    with open(os.path.join(storage.run_dir, RESULTS)) as f:
        return [json.loads(line) for line in f]


def test_round_commits_when_every_rank_reported(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"shard_0": b"a"})
    assert run.committed_rounds() == []  # rank 1 may still pass files
    report(ledger, run, tmp_path, 1, 1, {"shard_1": b"bb"})
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "shard_0", "shard_1"]
    manifest = json.load(open(os.path.join(run.checkpoint_dir(1), MANIFEST)))
    assert manifest["ranks"] == [0, 1] and manifest["metrics"]["rank"] == 0
    assert run.verify(run.checkpoint_dir(1)) == []
    # result.json names the checkpoint each report made.
    assert [(r["_rank"], r["checkpoint_dir_name"]) for r in result_rows(run)] == [
        (0, "checkpoint_000001"), (1, "checkpoint_000001"),
    ]


def test_rank0_only_rounds_commit_once_the_pattern_is_known(run, tmp_path):
    ledger = make_ledger(run, world_size=3)
    report(ledger, run, tmp_path, 0, 1, {"model": b"1"})
    assert run.committed_rounds() == []  # ranks 1 and 2 might still report round 1
    report(ledger, run, tmp_path, 0, 2, {"model": b"2"})
    assert run.committed_rounds() == []  # a slower rank may still be uploading round 1
    let_time_pass(ledger)
    # Round 2 began long ago, so round 1 is whole; and rank 0 alone reports, so round 2 is too.
    assert run.committed_rounds() == [1, 2]
    report(ledger, run, tmp_path, 0, 3, {"model": b"3"})
    assert run.committed_rounds() == [1, 2, 3]
    assert open(os.path.join(run.checkpoint_dir(3), "model"), "rb").read() == b"3"


def test_late_files_join_the_committed_checkpoint(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 1, 1, {"w1": b"one"})
    report(ledger, run, tmp_path, 1, 2, {"w1": b"two"})
    let_time_pass(ledger)
    # Rank 1 ran far ahead: round 1 closed without rank 0, and rank 1 then looked like the
    # only reporter, so round 2 closed too.
    assert run.committed_rounds() == [1, 2]
    with pytest.warns(UserWarning, match="out of step"):
        row = report(ledger, run, tmp_path, 0, 1, {"w0": b"zero"})
    assert ckpt_files(run, 1) == [MANIFEST, "w0", "w1"]  # nothing replaced, nothing lost
    assert open(os.path.join(run.checkpoint_dir(1), "w1"), "rb").read() == b"one"
    assert row["checkpoint_dir_name"] == "checkpoint_000001"
    assert [r.round for r in ledger.committed] == [1, 2]  # round 1 recorded once, not twice
    manifest = json.load(open(os.path.join(run.checkpoint_dir(1), MANIFEST)))
    assert manifest["ranks"] == [0, 1] and sorted(manifest["files"]) == ["w0", "w1"]
    assert run.verify(run.checkpoint_dir(1)) == []
    assert not os.path.exists(run.staging_dir(1))
    with pytest.warns(UserWarning, match="out of step"):
        report(ledger, run, tmp_path, 0, 2, {"w0": b"zero2"})
    assert ckpt_files(run, 2) == [MANIFEST, "w0", "w1"]
    assert open(os.path.join(run.checkpoint_dir(2), "w0"), "rb").read() == b"zero2"
    assert [r.round for r in ledger.committed] == [1, 2]


def test_a_rank_briefly_behind_is_waited_for(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 1, 1, {"w1": b"1"})
    report(ledger, run, tmp_path, 1, 2, {"w1": b"2"})  # rank 1 moved on; rank 0 is still uploading
    ledger.tick()
    assert run.committed_rounds() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report(ledger, run, tmp_path, 0, 1, {"w0": b"1"})
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "w0", "w1"]


def test_late_files_after_a_metrics_only_close_are_committed(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 1, 1)
    report(ledger, run, tmp_path, 1, 2)
    let_time_pass(ledger)  # round 1 closes with no files
    assert run.committed_rounds() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = report(ledger, run, tmp_path, 0, 1, {"model": b"m"})
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "model"]
    assert row["checkpoint_dir_name"] == "checkpoint_000001"
    assert ledger.latest.round == 1 and ledger.latest.metrics["rank"] == 0


def test_late_files_for_a_removed_checkpoint_are_dropped_with_a_warning(run, tmp_path):
    ledger = make_ledger(run, num_to_keep=1)
    report(ledger, run, tmp_path, 1, 1, {"w1": b"1"})
    report(ledger, run, tmp_path, 1, 2, {"w1": b"2"})
    let_time_pass(ledger)
    report(ledger, run, tmp_path, 1, 3, {"w1": b"3"})
    assert run.committed_rounds() == [3]  # rounds 1 and 2 committed, then removed by retention
    with pytest.warns(UserWarning, match="removed by CheckpointConfig"):
        report(ledger, run, tmp_path, 0, 1, {"w0": b"late"})
    assert run.committed_rounds() == [3]
    assert not os.path.exists(run.staging_dir(1))


def test_retention_removes_folders_and_records(run, tmp_path):
    ledger = make_ledger(run, world_size=1, num_to_keep=2, checkpoint_score_attribute="loss",
                         checkpoint_score_order="min")
    for round_, loss in enumerate([0.5, 0.1, 0.4, 0.2, 0.9], start=1):
        report(ledger, run, tmp_path, 0, round_, {"w": b"x"}, loss=loss)
    ledger.close_all(complete=True)
    assert run.committed_rounds() == [2, 4, 5]
    assert sorted(r.round for r in ledger.committed) == [2, 4, 5]
    assert [r.round for r in ledger.best()] == [2, 4, 5]
    assert ledger.latest.round == 5


def test_end_of_attempt_commits_open_rounds(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"a": b"1"})
    ledger.close_all(complete=True)
    assert run.committed_rounds() == [1]


def test_failed_attempt_drops_a_round_a_usual_reporter_missed(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"s0": b"1"})
    report(ledger, run, tmp_path, 1, 1, {"s1": b"1"})
    report(ledger, run, tmp_path, 0, 2, {"s0": b"2"})  # rank 1 died before its round-2 report
    with pytest.warns(UserWarning, match=r"rank\(s\) \[1\]"):
        ledger.close_all(complete=False)
    assert run.committed_rounds() == [1]
    assert not os.path.exists(run.staging_dir(2))
    assert ledger.latest.round == 1


def test_reports_survive_a_new_ledger(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"a": b"1"}, loss=1.0)
    report(ledger, run, tmp_path, 1, 1, loss=2.0)
    ledger.close_all(complete=True)
    again = Ledger(run, CheckpointConfig())
    again.load_previous()
    assert [r["loss"] for r in again.reports] == [1.0, 2.0]
    assert [r.round for r in again.committed] == [1]
    assert again.start_attempt(2) == 1  # the next attempt's rounds continue after round 1

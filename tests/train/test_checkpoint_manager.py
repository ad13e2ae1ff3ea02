"""The checkpoint manager on a real run folder: the commit protocol, late reports, retention, result.json.

These drive the ledger directly (the order of reports is fixed here, where
real workers would race), with the session's own staging step.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

from muster.train import CheckpointConfig
from muster.train._internal import policies
from muster.train._internal.checkpoint_manager import CheckpointManager
from muster.train.storage import MANIFEST, RESULTS, Storage


@pytest.fixture
def run(tmp_path):
    storage = Storage(str(tmp_path / "results"), "run")
    storage.makedirs(storage.run_dir)
    return storage


def make_ledger(storage, world_size=2, **checkpoint_kwargs):
    ledger = CheckpointManager(storage, CheckpointConfig(**checkpoint_kwargs))
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


def test_out_of_step_ranks_never_commit_a_partial_round(run, tmp_path):
    """The issue's scenario: rank 1 runs ahead (rounds 2, 3) while rank 0 is slow and dies
    before its round 2. Nothing but round 1 may commit, whole."""
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"s0": b"1"})
    report(ledger, run, tmp_path, 1, 1, {"s1": b"1"})
    report(ledger, run, tmp_path, 1, 2, {"s1": b"2"})
    report(ledger, run, tmp_path, 1, 3, {"s1": b"3"})
    assert run.committed_rounds() == [1]  # no clock: waiting costs nothing but the commit
    with pytest.warns(UserWarning, match=r"round 2 was not committed: rank\(s\) \[0\]"):
        ledger.close_all(complete=False)
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "s0", "s1"]
    assert ledger.latest.round == 1
    assert not os.path.exists(os.path.join(run.run_dir, ".staging"))


def test_a_slow_rank_only_delays_the_commit(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 1, 1, {"w1": b"1"})
    report(ledger, run, tmp_path, 1, 2, {"w1": b"2"})  # rank 1 moved on; rank 0 is still uploading
    assert run.committed_rounds() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report(ledger, run, tmp_path, 0, 1, {"w0": b"1"})
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "w0", "w1"]
    report(ledger, run, tmp_path, 0, 2, {"w0": b"2"})
    assert run.committed_rounds() == [1, 2]
    manifests = [json.load(open(os.path.join(run.checkpoint_dir(r), MANIFEST))) for r in (1, 2)]
    assert manifests[0]["committed_at"] <= manifests[1]["committed_at"]


def test_a_rank_far_behind_is_named_once_a_checkpoint_waits_on_it(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"w0": b"1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for r in (1, 2, 3, 4):  # reports without checkpoints: nothing waits on rank 0
            report(ledger, run, tmp_path, 1, r, {"w1": b"1"} if r == 1 else None)
    with pytest.warns(UserWarning, match=r"Rank 0 is 4 rounds behind"):
        report(ledger, run, tmp_path, 1, 5, {"w1": b"5"})  # round 5's checkpoint waits for rank 0
    assert run.committed_rounds() == [1]


SILENT = policies.SILENT_ROUNDS


def test_rank0_only_rounds_commit_once_the_pattern_is_known(run, tmp_path):
    ledger = make_ledger(run, world_size=3)
    for r in range(1, SILENT + 1):
        report(ledger, run, tmp_path, 0, r, {"model": str(r).encode()})
        assert run.committed_rounds() == []  # ranks 1 and 2 might still report round 1
    # Rank 0 is SILENT + 1 rounds in and the others never entered report(): they never will (a
    # rank's first report is always round 1), so every round so far is whole with rank 0 alone.
    report(ledger, run, tmp_path, 0, SILENT + 1, {"model": b"last"})
    assert run.committed_rounds() == list(range(1, SILENT + 2))
    report(ledger, run, tmp_path, 0, SILENT + 2, {"model": b"next"})
    assert run.committed_rounds() == list(range(1, SILENT + 3))
    assert open(os.path.join(run.checkpoint_dir(SILENT + 2), "model"), "rb").read() == b"next"


def test_a_rank_that_announced_its_report_is_never_taken_for_silent(run, tmp_path):
    ledger = make_ledger(run)
    ledger.announce(0, 1)  # rank 0 entered report(); its big upload is still going
    for r in range(1, SILENT + 3):
        report(ledger, run, tmp_path, 1, r, {"w1": b"x"})
    assert run.committed_rounds() == []
    report(ledger, run, tmp_path, 0, 1, {"w0": b"y"})
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "w0", "w1"]


def test_rank0_only_rounds_lost_at_a_failure_say_why_and_the_fix(run, tmp_path):
    # The cluster tutorial's loop: only rank 0 reports, and rank 1 dies 3 rounds in. Rank 1 never
    # entered report(), so "failed before reporting it" (once per round) misled; one warning says why.
    ledger = make_ledger(run, world_size=2)
    for r in (1, 2, 3):
        report(ledger, run, tmp_path, 0, r, {"model": b"m"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ledger.close_all(complete=False)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "round(s) [1, 2, 3] were not committed: rank(s) [1] had not called report()" in messages[0]
    assert "call train.report(metrics) on every rank" in messages[0]
    assert run.committed_rounds() == []


def test_rank0_only_pattern_is_remembered_by_the_next_attempt_and_driver(run, tmp_path):
    ledger = make_ledger(run, world_size=2)
    for r in range(1, SILENT + 2):
        report(ledger, run, tmp_path, 0, r, {"model": b"m"})
    ledger.close_all(complete=False)
    again = CheckpointManager(run, CheckpointConfig())
    again.load_previous()
    assert again.start_attempt(2) == SILENT + 1
    report(again, run, tmp_path, 0, SILENT + 2, {"model": b"5"})
    assert run.committed_rounds()[-1] == SILENT + 2  # at once: rank 0 is known to report alone


def test_finished_rank_is_not_waited_for(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"a": b"1"})
    report(ledger, run, tmp_path, 1, 1, {"b": b"1"})
    ledger.rank_finished(1)  # rank 1's loop ended after one report
    report(ledger, run, tmp_path, 0, 2, {"a": b"2"})
    assert run.committed_rounds() == [1, 2]


@pytest.mark.filterwarnings("ignore:Rank 0 is")
def test_a_rank_taken_for_silent_never_changes_a_committed_folder(run, tmp_path):
    ledger = make_ledger(run)
    for r in range(1, SILENT + 2):
        report(ledger, run, tmp_path, 1, r, {"w1": str(r).encode()})
    assert run.committed_rounds() == list(range(1, SILENT + 2))  # rank 0 looked like it never reports
    before = ckpt_files(run, 1)
    with pytest.warns(UserWarning, match="taken for a rank that never reports"):
        row = report(ledger, run, tmp_path, 0, 1, {"w0": b"late"})
    assert ckpt_files(run, 1) == before  # committed: never changed
    assert row["checkpoint_dir_name"] is None
    assert not os.path.exists(run.staging_dir(1))
    report(ledger, run, tmp_path, 1, SILENT + 2, {"w1": b"5"})
    assert SILENT + 2 not in run.committed_rounds()  # rank 0 does report: later rounds wait for it


def test_metrics_only_reporter_still_contributes_its_resume_state(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"model": b"m"})
    ledger.record(1, 1, {"rank": 1}, None, 0.0, 0, state=b"rank-1-state")
    assert run.committed_rounds() == [1]
    assert ckpt_files(run, 1) == [MANIFEST, "model"]
    state = os.path.join(run.checkpoint_dir(1), ".muster", "rank_1.pt")
    assert open(state, "rb").read() == b"rank-1-state"
    assert run.verify(run.checkpoint_dir(1)) == []


def test_stale_staged_files_of_a_dead_attempt_are_never_published(run, tmp_path):
    """A dead driver's attempt staged round 2 and never committed it; the next driver,
    which never saw that report, reuses round number 2."""
    ledger = make_ledger(run, world_size=1)
    report(ledger, run, tmp_path, 0, 1, {"model": b"1"})
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "stale.bin").write_bytes(b"from a dead attempt")
    run.upload_dir(str(stale), run.staging_dir(2))
    again = CheckpointManager(run, CheckpointConfig())
    again.load_previous()
    assert again.start_attempt(1) == 1  # round 2 is reused
    report(again, run, tmp_path, 0, 2, {"model": b"2"})
    assert ckpt_files(run, 2) == [MANIFEST, "model"]


def test_rows_are_written_once_their_round_is_decided(run, tmp_path):
    ledger = make_ledger(run)
    report(ledger, run, tmp_path, 0, 1, {"a": b"1"})
    ledger.flush()
    assert not os.path.exists(os.path.join(run.run_dir, RESULTS))  # round 1 is still open
    report(ledger, run, tmp_path, 1, 1, {"b": b"1"})
    assert [r["checkpoint_dir_name"] for r in result_rows(run)] == ["checkpoint_000001"] * 2


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
    again = CheckpointManager(run, CheckpointConfig())
    again.load_previous()
    assert [r["loss"] for r in again.reports] == [1.0, 2.0]
    assert [r.round for r in again.committed] == [1]
    assert again.start_attempt(2) == 1  # the next attempt's rounds continue after round 1


def test_a_checkpoint_without_the_score_attribute_is_warned_of_once(run, tmp_path):
    """Ray logs an error when a checkpoint's report lacks checkpoint_score_attribute; muster said nothing, and
    retention quietly removed that checkpoint first."""
    ledger = make_ledger(run, world_size=1, num_to_keep=1, checkpoint_score_attribute="i")
    report(ledger, run, tmp_path, 0, 1, {"m": b"1"}, i=1)
    said = r"checkpoint_000002 was reported without 'i', the CheckpointConfig\(checkpoint_score_attribute='i'\)"
    with pytest.warns(UserWarning, match=said + r".*keys are \['other', 'rank', "):
        report(ledger, run, tmp_path, 0, 2, {"m": b"2"}, other=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per run
        report(ledger, run, tmp_path, 0, 3, {"m": b"3"}, other=2)

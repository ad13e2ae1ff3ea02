"""The run store on real runs: what a run, its failure and its restart leave in SQLite."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from muster.observe.store import schema, store_path, writer
from muster.observe.store.reader import StoreNotFoundError, StoreReader

SLOW_BATCH_S = 0.03  # as in conftest.recorded_loop


def _run(recorded):
    reader = StoreReader.for_root(recorded["storage"])
    run = reader.find_run(recorded["name"])
    assert run is not None
    return reader, run


def test_store_lives_in_the_storage_root_and_is_versioned(recorded):
    path = store_path(recorded["storage"])
    assert path == os.path.join(recorded["storage"], ".muster", "runs.db") and os.path.exists(path)
    conn = sqlite3.connect(path)
    try:
        assert schema.version(conn) == schema.SCHEMA_VERSION == 5
    finally:
        conn.close()


def test_run_reports_workers_checkpoints_and_logs_are_recorded(recorded):
    reader, run = _run(recorded)
    result = recorded["result"]
    assert run["status"] == "FINISHED" and run["num_workers"] == 2 and run["path"] == result.path
    assert not run["stale"]
    reports = reader.reports(run["id"])
    # every report of every rank, the same rows the ledger kept
    assert len(reports) == len(result.all_reports) == run["reports"]
    assert {(r["attempt"], r["rank"], r["iteration"]) for r in reports} == {
        (r["_attempt"], r["_rank"], r["training_iteration"]) for r in result.all_reports
    }
    assert all("loss" in r["metrics"] and "_rank" not in r["metrics"] for r in reports)
    assert all(r["step_s"] > 0 and 0 <= r["data_wait_s"] <= r["step_s"] for r in reports)
    workers = reader.workers(run["id"])
    assert [(w["rank"], w["state"]) for w in workers] == [(0, "FINISHED"), (1, "FINISHED")]
    assert all(w["pid"] > 0 and w["host"] and w["resources"] == {"CPU": 1.0} for w in workers)
    checkpoints = reader.checkpoints(run["id"])
    assert [c["round"] for c in checkpoints][-1] == 6 and checkpoints[-1]["path"] == result.checkpoint.path
    assert checkpoints[-1]["metrics"]["loss"] == pytest.approx(1 / 6)
    logs = reader.logs(run["id"], rank=1)
    assert logs and all(line["rank"] == 1 for line in logs)
    assert "epoch 5 done on rank 1" in [line["line"] for line in logs]
    samples = reader.samples(run["id"])
    assert {s["rank"] for s in samples} == {0, 1}
    assert all(s["rss_bytes"] > 10 * 2**20 and s["cpu_percent"] >= 0 for s in samples)


def test_failure_cause_and_restart_are_on_the_timeline(recorded):
    reader, run = _run(recorded)
    attempts = reader.attempts(run["id"])
    assert [(a["attempt"], a["status"]) for a in attempts] == [(0, "FAILED"), (1, "FINISHED")]
    assert "rank 1" in attempts[0]["cause"] and "SIGKILL" in attempts[0]["cause"]
    kinds = [e["kind"] for e in reader.events(run["id"])]
    assert kinds == ["start", "attempt", "failure", "restart", "attempt", "finish"]
    failure = next(e for e in reader.events(run["id"]) if e["kind"] == "failure")
    assert failure["rank"] == 1 and failure["attempt"] == 0 and "WorkerCrashedError" in failure["message"]
    first = reader._query("SELECT rank, state FROM workers WHERE run_id = ? AND attempt = 0 ORDER BY rank",
                          (run["id"],))
    assert [(w["rank"], w["state"]) for w in first] == [(0, "STOPPED"), (1, "FAILED")]
    assert run["failures"] == 1 and run["attempt"] == 1


def test_the_rank_with_the_slow_loader_is_flagged(recorded):
    reader, run = _run(recorded)
    by_rank = {w["rank"]: w for w in reader.workers(run["id"])}
    # rank 1 waits SLOW_BATCH_S per batch (8 batches a step); rank 0 waits at the barrier instead
    assert by_rank[1]["data_wait_s"] > 6 * SLOW_BATCH_S
    assert by_rank[0]["data_wait_s"] < by_rank[1]["data_wait_s"] / 4
    assert by_rank[1]["straggler"] and "on data" in by_rank[1]["reason"]
    assert not by_rank[0]["straggler"]


def test_writes_never_wait_on_a_locked_database(tmp_path):
    path = str(tmp_path / "runs.db")
    w = writer.acquire(path)
    try:
        run_id = w.execute_now(
            "INSERT INTO runs (path, name, status, created_at, updated_at) VALUES ('p', 'n', 'RUNNING', 0, 0)"
        )
        blocker = sqlite3.connect(path, timeout=0)
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the file
        try:

            def put_all() -> None:
                for i in range(5000):
                    w.put("INSERT INTO events (run_id, time, kind, message) VALUES (?, ?, 'x', ?)", (run_id, i, str(i)))

            training = threading.Thread(target=put_all, daemon=True)
            training.start()
            training.join(20)
            # All 5000 puts returned while the lock is still held: the training thread only queued them.
            # Had put waited for its write, it would be stuck until the rollback below.
            assert not training.is_alive()
            time.sleep(0.3)  # the writer is now retrying against the lock
        finally:
            blocker.rollback()
            blocker.close()
        assert w.flush(timeout=30)
        assert w.query_now("SELECT COUNT(*) FROM events")[0][0] == 5000
    finally:
        w.release()


def test_a_newer_schema_is_refused_with_the_fix(tmp_path):
    path = str(tmp_path / "runs.db")
    conn = writer.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(schema.SchemaTooNewError, match="version 99.*pip install -U muster"):
        StoreReader(path).runs()


def test_a_version_1_store_gains_the_serve_tables(tmp_path):
    path = str(tmp_path / "runs.db")
    conn = sqlite3.connect(path)
    conn.executescript(schema._V1)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO runs (path, name, status, created_at, updated_at) VALUES ('/r', 'old', 'FINISHED', 1, 1)")
    conn.commit()
    conn.close()
    reader = StoreReader(path)
    assert reader.serve_deployments() == [] and reader.find_serve("x") == []  # v1: no Serve tables, no error
    assert reader.data_ops(1) == [] and reader.data_ops_latest(1) == []  # nor muster.data's
    assert reader.user_metrics() == []  # nor the engine's user metrics
    writer.connect(path).close()  # a newer writer migrates it forward, keeping what was there
    conn = sqlite3.connect(path)
    try:
        assert schema.version(conn) == 5
        assert {"serve_replicas", "serve_metrics", "serve_events", "serve_logs", "data_ops",
                "serve_custom_metrics", "user_metrics"} <= {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert [r["name"] for r in reader.runs()] == ["old"] and reader.serve_deployments() == []


def test_a_version_2_store_gains_the_llm_columns(tmp_path):
    path = str(tmp_path / "runs.db")
    conn = sqlite3.connect(path)
    conn.executescript(schema._V1 + schema._V2)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')")
    conn.execute("INSERT INTO serve_metrics (time, app, deployment, served) VALUES (1, 'a', 'D', 7)")
    conn.commit()
    conn.close()
    writer.connect(path).close()
    (row,) = StoreReader(path).serve_metrics("a", "D")
    assert row["served"] == 7 and row["completion_tokens"] is None and row["queue_depth"] is None
    conn = sqlite3.connect(path)
    try:
        assert schema.version(conn) == 5
    finally:
        conn.close()


def test_reader_says_where_it_looked(tmp_path):
    with pytest.raises(StoreNotFoundError, match="--storage-path"):
        StoreReader.for_root(str(tmp_path / "nothing"))


def test_store_can_be_turned_off(storage, monkeypatch):
    import muster.train as train
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    monkeypatch.setenv("MUSTER_RUN_STORE", "0")

    def loop():
        train.report({"loss": 1.0})

    TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                 run_config=RunConfig(name="off", storage_path=storage, verbose=0)).fit()
    assert os.path.isdir(os.path.join(storage, "off")) and not os.path.exists(store_path(storage))


def test_tune_trials_are_runs_grouped_by_experiment(tuned):
    reader = StoreReader.for_root(tuned["storage"])
    assert [(e["name"], e["trials"], e["finished"]) for e in reader.experiments()] == [("lr_search", 4, 4)]
    trials = reader.runs(experiment="lr_search")
    assert sorted(t["config"]["lr"] for t in trials) == [0.01, 0.03, 0.05, 0.1]
    assert {t["trial_id"] for t in trials} == {r.metrics["trial_id"] for r in tuned["grid"]}
    for t in trials:
        assert t["path"].startswith(os.path.join(tuned["storage"], "lr_search") + os.sep)
        assert t["reports"] == 4
        assert t["last_metrics"]["loss"] == pytest.approx((t["config"]["lr"] - 0.05) ** 2 + 0.0025)
        assert any(f"lr={t['config']['lr']} step 3" == line["line"] for line in reader.logs(t["id"]))


def test_an_errored_run_keeps_its_cause(storage):
    import muster.train as train
    from muster.exceptions import TrainingFailedError
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def loop():
        train.report({"loss": 1.0})
        if train.get_context().get_world_rank() == 1:
            raise ValueError("bad batch 17")

    with pytest.raises(TrainingFailedError):
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(name="bad", storage_path=storage, verbose=0)).fit()
    reader = StoreReader.for_root(storage)
    run = reader.find_run("bad")
    assert run["status"] == "ERRORED" and "ValueError" in run["error"] and "bad batch 17" in run["error"]
    failure = next(e for e in reader.events(run["id"]) if e["kind"] == "failure")
    assert failure["rank"] == 1 and "bad batch 17" in failure["message"]
    assert [(w["rank"], w["state"]) for w in reader.workers(run["id"])] == [(0, "STOPPED"), (1, "FAILED")]
    assert reader.events(run["id"])[-1]["message"].startswith("run errored: TaskError")

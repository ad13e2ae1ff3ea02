"""``read_sql`` against sqlite3 files: column types, one lazy read task or hash shards, and the errors,
each checked against what Ray 2.60's ``ray.data.read_sql`` gives for the same script."""

from __future__ import annotations

import hashlib
import re
import sqlite3

import pyarrow as pa
import pytest

import muster.data as md
from muster.data.exceptions import DataSchemaError, DataTypeError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

ROWS = 300


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "t.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t(id INTEGER, x REAL, name TEXT, n, b BLOB, maybe INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                     [(i, i / 2, f"n{i}", None, bytes([i % 256]), None if i % 3 else i) for i in range(ROWS)])
    conn.execute("CREATE TABLE mixed(v)")
    conn.executemany("INSERT INTO mixed VALUES (?)", [(1,), ("a",)])
    conn.execute("CREATE TABLE empty(a INTEGER)")
    conn.commit()
    conn.close()
    return path


def _md5(value):
    return int(hashlib.md5(str(value).encode()).hexdigest()[:8], 16)


def _tasks(ds) -> int:
    return int(re.search(r"Operator 1 ReadSQL: (\d+) tasks executed", ds.stats()).group(1))


def test_reads_sqlite_types_in_one_lazy_task(db, threads_only):
    opened = []

    def connect():
        opened.append(1)
        return sqlite3.connect(db)

    ds = md.read_sql("SELECT * FROM t", connect)
    assert opened == [] and repr(ds) == "Dataset(num_rows=?, schema=Unknown schema)"  # nothing read yet
    table = ds.materialize()
    assert table.schema().base_schema == pa.schema([("id", pa.int64()), ("x", pa.float64()), ("name", pa.string()),
                                                    ("n", pa.null()), ("b", pa.binary()), ("maybe", pa.int64())])
    assert table.take(2) == [{"id": 0, "x": 0.0, "name": "n0", "n": None, "b": b"\x00", "maybe": 0},
                             {"id": 1, "x": 0.5, "name": "n1", "n": None, "b": b"\x01", "maybe": None}]
    assert table.count() == ROWS and _tasks(table) == 1 and opened == [1]
    assert md.read_sql("SELECT id FROM t WHERE id < ?", connect, sql_params=(3,)).take_all() == [
        {"id": 0}, {"id": 1}, {"id": 2}]
    assert md.read_sql("SELECT * FROM empty", connect).count() == 0


def test_shard_keys_split_the_read_by_hash(db):
    def connect():
        conn = sqlite3.connect(db)
        conn.create_function("MD5", 1, _md5)  # sqlite3 has MOD and ABS, not MD5
        return conn

    ds = md.read_sql("SELECT id, name FROM t", connect, shard_keys=["id"], override_num_blocks=4)
    shards = [set(b["id"].to_pylist()) for b in ds.iter_batches(batch_size=None, batch_format="pyarrow")]
    assert len(shards) == 4 and sorted(i for s in shards for i in s) == list(range(ROWS))
    assert all(_md5(i) % 4 == k for k, s in enumerate(shards) for i in s)  # shard k: MOD(ABS(MD5(id)), 4) = k
    mapped = ds.map_batches(lambda batch: batch)  # read and map fused into jobs pooled workers may run
    assert sorted(r["id"] for r in mapped.take_all()) == list(range(ROWS))
    assert _tasks(ds.materialize()) == 4
    ds = md.read_sql("SELECT id FROM t", connect, shard_keys=["id"]).materialize()
    assert _tasks(ds) == ROWS // 50 and ds.count() == ROWS  # as Ray: at most one task per 50 rows
    assert md.read_sql("SELECT a FROM empty", connect, shard_keys=["a"], override_num_blocks=4).count() == 0


def test_sharding_the_database_cannot_run(db):
    def connect():
        return sqlite3.connect(db)

    with pytest.raises(InvalidArgumentError, match=r"override_num_blocks=3\): shard_keys must be provided"):
        md.read_sql("SELECT id FROM t", connect, override_num_blocks=3)
    with pytest.raises(InvalidArgumentError, match=r"does not support sharding.*no such function: MD5.*"
                                                   r"override_num_blocks to 1"):
        md.read_sql("SELECT id FROM t", connect, shard_keys=["id"], override_num_blocks=4)
    ds = md.read_sql("SELECT id FROM t", connect, shard_keys=["id"]).materialize()  # falls back to one task
    assert ds.count() == ROWS and _tasks(ds) == 1


def test_errors_name_the_bad_value_and_the_fix(db):
    with pytest.raises(InvalidTypeError, match=r"connection_factory='sqlite:///t.db'\): pass a function"):
        md.read_sql("SELECT * FROM t", "sqlite:///t.db")
    with pytest.raises(UserFunctionError, match=r"failed the query 'SELEC \* FROM t'.*near \"SELEC\": syntax error"):
        md.read_sql("SELEC * FROM t", lambda: sqlite3.connect(db)).take_all()
    with pytest.raises(DataSchemaError, match=r"column 'v'.*\['int', 'str'\].*CAST\(v AS TEXT\)"):
        md.read_sql("SELECT v FROM mixed", lambda: sqlite3.connect(db)).take_all()
    with pytest.raises(DataTypeError, match=r"returned 42 \(int\), which has no 'close'"):
        md.read_sql("SELECT * FROM t", lambda: 42).take_all()

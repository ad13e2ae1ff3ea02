"""muster.data's extension points and newer operators, the same on both engines: an ``AggregateFnV2``
subclass, a ``FileBasedDatasource`` subclass, the file sinks (``RowBasedFileDatasink``,
``BlockBasedFileDatasink``, ``FilenameProvider``, ``write_numpy``, ``write_images``), keyed
``repartition`` and ``set_name``. On Ray, Ray's tasks run the user's subclasses (each check notes the
pid), and a sink's files are still whole or absent when the write that fails runs in a Ray worker.

Every class is defined inside its test: Ray's workers get it by value, as a user's script's would be.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pyarrow as pa
import pytest

import muster.data as md
from muster.data.exceptions import UserFunctionError

pytestmark = pytest.mark.timeout(240)  # a few ray.data pipelines each; the first also pays the cluster's start


def _files(root) -> list[str]:
    """Every file under ``root`` (hidden ones too), relative, sorted."""
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _ran_elsewhere(pids, engine) -> bool:
    """On Ray, the user's code ran in Ray's workers, not in this driver."""
    return engine == "local" or os.getpid() not in set(pids)


def test_an_aggregate_fn_v2_subclass_aggregates_and_groups(engine):
    from muster.data.aggregate import AggregateFnV2
    from muster.data.block import BlockAccessor

    class Mean(AggregateFnV2):
        def __init__(self, on):
            super().__init__(f"mean({on})", lambda: [0, 0], on=on, ignore_nulls=True)

        def aggregate_block(self, block):
            acc = BlockAccessor.for_block(block)
            n = acc.count(self._target_col_name, self._ignore_nulls)
            return [acc.sum(self._target_col_name, self._ignore_nulls), n] if n else None

        def combine(self, current_accumulator, new):
            return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

        def finalize(self, accumulator):
            return accumulator[0] / accumulator[1]

    class Pids(AggregateFnV2):  # a list accumulator: on Ray, accumulators travel in Arrow columns
        def __init__(self):
            super().__init__("pids", list, on=None, ignore_nulls=True)

        def aggregate_block(self, block):
            return [os.getpid()]

        def combine(self, current_accumulator, new):
            return sorted(set(current_accumulator) | set(new))

    ds = md.from_items([{"id": i, "k": i % 3} for i in range(30)], override_num_blocks=3)
    total = ds.aggregate(Mean("id"), Pids())
    assert total["mean(id)"] == 14.5 and _ran_elsewhere(total["pids"], engine)
    groups = ds.groupby("k").aggregate(Mean("id")).sort("k").take_all()
    assert groups == [{"k": 0, "mean(id)": 13.5}, {"k": 1, "mean(id)": 14.5}, {"k": 2, "mean(id)": 15.5}]


def test_a_file_based_datasource_subclass_reads_its_files(engine, tmp_path):
    from muster.data.datasource import FileBasedDatasource

    class Words(FileBasedDatasource):
        def __init__(self, paths, **options):
            super().__init__(paths, file_extensions=["txt"], **options)

        def _read_stream(self, f, path):
            words = f.readall().decode().split()
            yield pa.table({"word": words, "pid": [os.getpid()] * len(words)})

    for i in range(3):
        (tmp_path / f"{i}.txt").write_text(f"a{i} b{i}")
    (tmp_path / "skip.csv").write_text("not,read")
    ds = md.read_datasource(Words(str(tmp_path), include_paths=True), override_num_blocks=2)
    assert sorted(os.path.basename(p) for p in ds.input_files()) == ["0.txt", "1.txt", "2.txt"]
    rows = ds.take_all()
    assert sorted((r["word"], os.path.basename(r["path"])) for r in rows) == sorted(
        (f"{w}{i}", f"{i}.txt") for w in "ab" for i in range(3))
    assert _ran_elsewhere([r["pid"] for r in rows], engine) and ds.count() == 6


def test_file_sinks_write_whole_files_in_the_engines_workers(engine, tmp_path):
    """Row- and block-based sinks with a FilenameProvider and Ray's save modes; a row whose file fails
    midway leaves neither that file nor its hidden temporary, wherever the write ran."""
    from muster.data.datasource import BlockBasedFileDatasink, FilenameProvider, RowBasedFileDatasink

    class RowText(RowBasedFileDatasink):
        def write_row_to_file(self, row, file):
            file.write(f"{row['id']},".encode())
            if row["id"] == 2:
                raise OSError("disk full")
            file.write(str(os.getpid()).encode())

    class Named(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"part-{task_index}.{self.file_format}"

    class BlockText(BlockBasedFileDatasink):
        def write_block_to_file(self, block, file):
            file.write(f"{block.to_arrow().column('id').to_pylist()};{os.getpid()}".encode())

    ds = md.range(2, override_num_blocks=1)
    ds.write_datasink(RowText(str(tmp_path / "rows"), file_format="txt"))
    texts = [(tmp_path / "rows" / f).read_text().split(",") for f in _files(tmp_path / "rows")]
    assert sorted(t[0] for t in texts) == ["0", "1"] and _ran_elsewhere([int(t[1]) for t in texts], engine)
    with pytest.raises(UserFunctionError, match="disk full"):
        md.range(4, override_num_blocks=1).write_datasink(RowText(str(tmp_path / "bad"), file_format="txt"))
    left = _files(tmp_path / "bad")  # rows 0 and 1, whole; nothing of row 2 (nor 3, never started)
    assert len(left) == 2 and sorted((tmp_path / "bad" / f).read_text().split(",")[0] for f in left) == ["0", "1"]
    sink = BlockText(str(tmp_path / "blocks"), file_format="txt", filename_provider=Named(file_format="txt"))
    md.range(6, override_num_blocks=2).write_datasink(sink)
    assert _files(tmp_path / "blocks") == ["part-0.txt", "part-1.txt"]
    ids = sorted(i for f in ("part-0.txt", "part-1.txt")
                 for i in eval((tmp_path / "blocks" / f).read_text().split(";")[0]))  # noqa: S307 - our own list
    assert ids == list(range(6))
    md.range(3).write_datasink(BlockText(str(tmp_path / "blocks"), mode="ignore"))  # the folder exists: nothing
    assert _files(tmp_path / "blocks") == ["part-0.txt", "part-1.txt"]


def test_write_numpy_and_write_images_round_trip(engine, tmp_path):
    pytest.importorskip("PIL")
    files = md.range(5, override_num_blocks=1).write_numpy(str(tmp_path / "npy"), column="id")
    assert sorted(int(x) for f in files for x in np.load(f)) == list(range(5))
    assert sorted(r["data"] for r in md.read_numpy(str(tmp_path / "npy")).take_all()) == list(range(5))
    images = [np.full((4, 4, 3), 40 * i, np.uint8) for i in range(3)]
    assert md.from_items([{"image": i} for i in images]).write_images(str(tmp_path / "png"), column="image") is None
    assert len(_files(tmp_path / "png")) == 3 and all(f.endswith(".png") for f in _files(tmp_path / "png"))
    back = sorted(int(r["image"][0, 0, 0]) for r in md.read_images(str(tmp_path / "png")).take_all())
    assert back == [0, 40, 80]


def test_repartition_by_keys_puts_each_key_in_one_block(engine, tmp_path):
    ds = md.from_items([{"k": i % 4, "v": i} for i in range(40)]).repartition(3, keys=["k"])
    blocks = [b for b in ds._execute() if b.num_rows]
    keys = [set(b.column("k").to_pylist()) for b in blocks]
    assert sum(len(k) for k in keys) == 4 and set().union(*keys) == {0, 1, 2, 3}  # no key in two blocks
    assert sorted(r["v"] for r in ds.take_all()) == list(range(40))
    ds.write_parquet(str(tmp_path), partition_cols=["k"])
    assert {os.path.dirname(f) for f in _files(tmp_path)} == {f"k={k}" for k in range(4)}
    assert len(_files(tmp_path)) == 4  # one block per key: one file per partition


def test_set_name_is_kept_and_on_ray_names_rays_dataset(engine):
    ds = md.range(6)
    ds.set_name("squares")
    mapped = ds.map(lambda r: {"id": r["id"] ** 2})
    assert mapped.name == "squares" and mapped.materialize().name == "squares"
    assert sorted(r["id"] for r in mapped.take_all()) == [0, 1, 4, 9, 16, 25]
    if engine == "ray":  # Ray's stats, dashboard and metrics know the dataset by its name
        import ray
        from ray.data._internal.stats import get_or_create_stats_actor

        tags = ray.get(get_or_create_stats_actor().get_datasets.remote())
        assert any(t.startswith("squares_") for t in tags), list(tags)


def test_random_and_monotonic_ids_are_rays_on_both_engines(engine):
    """Ray 2.60's values for a seeded random() and the ids over three one-block read tasks (run under ray.data)."""
    from muster.data.expressions import monotonically_increasing_id, random

    ds = md.range(6, override_num_blocks=3).with_columns({"uid": monotonically_increasing_id(),
                                                          "r": random(seed=1, reseed_after_execution=False)})
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [r["uid"] for r in rows] == [0, 1, 1 << 33, (1 << 33) + 1, 1 << 34, (1 << 34) + 1]
    assert [round(r["r"], 6) for r in rows] == [0.298268, 0.678487, 0.496519, 0.580350, 0.946806, 0.976884]


def test_explain_prints_the_plan_of_the_engine_that_runs_it(engine, capsys):
    md.range(6).map(lambda r: r).explain()
    out = capsys.readouterr().out
    if engine == "ray":  # Ray runs the plan: Ray's own explain
        assert "MapRows[Map(<lambda>)]\n+- Read[ReadRange]" in out and "-------- Physical Plan (Optimized)" in out
    else:
        # range(6): 3 blocks of 2 rows (two per CPU at most, two rows a block at least)
        assert out.endswith("-------- Execution --------\nReadTasks[ReadRange->Map(<lambda>)] (3 tasks, the "
                            "transforms fused into each)\n")


def test_explain_of_a_join_runs_none_of_its_inputs(engine, tmp_path, capsys):
    """explain() runs nothing. On Ray, a join's inputs ran to build Ray's dataset (muster joins the blocks Ray
    makes for each): explain() ran them. Now it explains Ray's own join of the two inputs' plans."""
    marker = str(tmp_path / "ran")

    def mark(batch):
        with open(marker, "w") as f:
            f.write("ran")
        return batch

    md.range(4).map_batches(mark).join(md.range(3), "inner", 2, on=("id",)).explain()
    out = capsys.readouterr().out
    assert not os.path.exists(marker) and "Join[Join]" in out, out
    if engine == "ray":
        assert "JoinShuffleReduce(num_partitions=2)" in out and "MapBatches(mark)" in out, out


def test_a_filter_after_read_parquet_gives_the_same_rows_on_both_engines(engine, tmp_path):
    """Pushed into muster's scan; on Ray, replayed as Ray's read_parquet then filter (Ray pushes it itself), a
    string one as Ray's own expression: Ray deprecates strings, and its parser refuses some that muster takes."""
    import pyarrow.parquet as pq

    from muster.data.expressions import col

    pq.write_table(pa.table({"a": list(range(100)), "s": [str(i % 3) for i in range(100)]}), tmp_path / "x.parquet")
    ds = md.read_parquet(str(tmp_path)).filter(expr=(col("a") > 90) & (col("s") == "1")).filter(expr="a < 98")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sorted(r["a"] for r in ds.take_all()) == [91, 94, 97]
        text = md.read_parquet(str(tmp_path)).filter(
            expr="-a >= -12 and s not in ['0', '2'] and s is not None or a / 2 > 48.5")  # Ray's parser: a TypeError
        assert sorted(r["a"] for r in text.take_all()) == [1, 4, 7, 10, 98, 99]
    # on Ray as Ray's own expressions: Ray deprecates string ones ("String expressions are deprecated")
    assert not [w for w in caught if "expression" in str(w.message).lower()], [str(w.message) for w in caught]
    moved = md.read_parquet(str(tmp_path)).rename_columns({"a": "b"}).sort("b", descending=True).filter(
        expr=(col("b") > 90) & (col("s") == "1"))  # moved below the sort and the rename, into the scan
    assert [r["b"] for r in moved.take_all()] == [97, 94, 91]
    both = md.read_parquet(str(tmp_path)).union(md.read_parquet(str(tmp_path))).filter(expr=col("a") > 97)
    assert sorted(r["a"] for r in both.take_all()) == [98, 98, 99, 99]  # muster: pushed into both scans


def test_a_join_and_a_filter_moved_below_it_give_the_same_rows_on_both_engines(engine, tmp_path):
    """The join is lazy on both engines; muster moves the filter into the left scan, then on Ray replays the
    plan's inputs as Ray's reads (Ray filters its scan itself) and joins their blocks with pyarrow, as here."""
    import pyarrow.parquet as pq

    from muster.data.expressions import col

    pq.write_table(pa.table({"id": list(range(20)), "x": [i * 10 for i in range(20)]}), tmp_path / "l.parquet")
    right = md.from_items([{"key": k, "w": str(k)} for k in range(5, 25)])
    joined = md.read_parquet(str(tmp_path / "l.parquet")).join(right, "left_outer", 2, on="id", right_on="key")
    rows = sorted(joined.filter(expr=col("id") >= 17).take_all(), key=lambda r: r["id"])
    assert rows == [{"id": i, "x": i * 10, "w": str(i)} for i in (17, 18, 19)]
    assert joined.count() == 20


def test_a_join_runs_when_its_first_batch_is_pulled_and_gives_the_gathered_joins_rows(engine, tmp_path):
    """On Ray, iterator(), iter_batches() and streaming_split() ran both inputs and joined them on the driver
    before a batch was asked for (streaming_split: the whole output gathered there, to split it). Now the
    join is a read whose task runs in a Ray worker when the first batch is pulled. Every join type gives the
    rows, names and types of pyarrow's join of the gathered inputs (the embedded engine's)."""
    import threading

    from muster.data import combine

    marker = tmp_path / "ran"

    def mark(batch):
        marker.write_text("ran")
        return batch

    left = [{"id": i % 7 if i % 5 else None, "v": f"l{i}", "lo": i} for i in range(12)]
    right = [{"key": i % 9, "v": f"r{i}", "ro": -i} for i in range(10)]
    cases = [(t, ("_l", None) if i % 3 == 0 else (None, "_r") if i % 3 == 1 else ("_l", "_r"))
             for i, t in enumerate(sorted(combine.JOIN_TYPES))]
    # every type on the embedded engine; on Ray (the same join, in a Ray task) the first three, one per suffix pair
    for join_type, (ls, rs) in cases if engine == "local" else cases[:3]:
        joined = md.from_items(left, override_num_blocks=3).map_batches(mark, batch_format="pyarrow").join(
            md.from_items(right, override_num_blocks=2), join_type, 2, on="id", right_on="key", left_suffix=ls,
            right_suffix=rs)
        batches, splits = joined.iter_batches(batch_format="pyarrow"), joined.streaming_split(2, equal=False)
        assert not marker.exists(), join_type  # nothing ran: neither input, nor the join
        shard_rows: list[list] = [[], []]
        readers = [threading.Thread(target=lambda i=i: shard_rows[i].extend(splits[i].iter_rows())) for i in (0, 1)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout=120)
        want = combine.join_tables(pa.Table.from_pylist(left), pa.Table.from_pylist(right), join_type, ["id"],
                                   ["key"], ls, rs)
        got = pa.concat_tables(list(batches))
        assert marker.exists() and got.schema == want.schema, (join_type, got.schema, want.schema)
        assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist())), join_type
        assert sorted(map(repr, shard_rows[0] + shard_rows[1])) == sorted(map(repr, want.to_pylist())), join_type
        marker.unlink()

    def boom(batch):
        raise RuntimeError("boom")

    with pytest.raises(UserFunctionError, match="MapBatches failed in boom"):  # raised in the join's task, on Ray
        md.range(3).map_batches(boom).join(md.range(3), "inner", 1).take_all()


def test_stats_is_empty_before_a_run_and_names_each_operator_after_any_consumption(engine):
    ds = md.range(20, override_num_blocks=2).map_batches(lambda b: {"id": b["id"] * 2})
    assert ds.stats() == ""  # as Ray's, before anything runs
    assert sum(r["id"] for r in ds.take_all()) == 380  # not the dataset's own iterator: Ray's text must still come
    text = ds.stats()
    assert text.startswith("Operator 1 "), text
    assert "MapBatches" in text and "tasks executed" in text and "Dataset throughput:" in text, text

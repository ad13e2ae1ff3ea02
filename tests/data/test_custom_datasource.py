"""Ray Data's custom-source and custom-sink API: Datasource/ReadTask/read_datasource and
Datasink/write_datasink, on real muster datasets."""

from __future__ import annotations

import threading

import pandas as pd
import pyarrow as pa
import pytest

import muster.data as md
from muster.data.block import BlockMetadata
from muster.data.datasource import Datasink, Datasource, ReadTask, WriteResult
from muster.data.exceptions import DataTypeError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError, UnsupportedRayAPIError


class RangeDatasource(Datasource):
    """``n`` rows ``{"id": i}`` in ``parallelism`` tasks, as Ray's guide writes a source."""

    def __init__(self, n, pandas=False, barrier=None, claim=None):
        super().__init__()
        self.n, self.pandas, self.barrier, self.claim = n, pandas, barrier, claim
        self.asked, self.reads = [], []

    def estimate_inmemory_data_size(self):
        return self.n * 8

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        self.asked.append(parallelism)
        step = max(1, -(-self.n // parallelism))
        return [ReadTask(lambda lo=lo: self._read(lo, min(self.n, lo + step)),
                         BlockMetadata(num_rows=self.claim or min(self.n, lo + step) - lo, size_bytes=8 * step,
                                       input_files=[f"part-{lo}"], exec_stats=None))
                for lo in range(0, self.n, step)]

    def _read(self, lo, hi):
        self.reads.append(lo)
        if self.barrier is not None:
            self.barrier.wait()  # every task waits for the others: they must run at once
        for start in range(lo, hi, 2):  # a generator of several blocks per task
            table = pa.table({"id": list(range(start, min(hi, start + 2)))})
            yield table.to_pandas() if self.pandas else table


def test_read_datasource_asks_for_n_tasks_and_reads_them_lazily_in_parallel(threads_only):
    source = RangeDatasource(12, barrier=threading.Barrier(2, timeout=10))
    ds = md.read_datasource(source, override_num_blocks=2)
    assert source.asked == [2] and source.reads == []  # planned now, read when consumed
    assert repr(ds) == "Dataset(num_rows=12, schema=Unknown schema)"  # as Ray prints it, reading nothing
    assert sorted(r["id"] for r in ds.take_all()) == list(range(12))
    assert sorted(source.reads) == [0, 6]
    assert ds.input_files() == ["part-0", "part-6"]
    assert ds.map(lambda r: {"twice": r["id"] * 2}).sum("twice") == 132


def test_pandas_blocks_metadata_count_and_ray_s_parallelism_names(threads_only):
    source = RangeDatasource(5, pandas=True)
    ds = md.read_datasource(source, override_num_blocks=5)
    table = ds.to_arrow()
    assert table.schema == pa.schema([("id", pa.int64())]) and table.column("id").to_pylist() == [0, 1, 2, 3, 4]
    claims = RangeDatasource(4, claim=100)  # as in Ray: count() adds the tasks' num_rows up, reading nothing
    assert md.read_datasource(claims, override_num_blocks=2).count() == 200 and claims.reads == []
    with pytest.warns(DeprecationWarning, match="override_num_blocks=3"):
        old = RangeDatasource(3)
        md.read_datasource(old, parallelism=3)
    assert old.asked == [3]
    default = RangeDatasource(3)
    md.read_datasource(default)
    assert default.asked[0] >= 2  # Ray's default: two per CPU at least, for a small source


def test_a_read_task_that_yields_no_block_names_the_source_and_the_fix():
    class Lists(Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(lambda: [[1, 2, 3]], BlockMetadata(None, None, None))]

    class Bare(Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(lambda: pa.table({"a": [1]}), BlockMetadata(1, None, None))]

    class Broken(Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(lambda: 1 / 0, BlockMetadata(None, None, None))]

    with pytest.raises(DataTypeError, match=r"ReadLists \(read task 0, .*\) yielded a list .*pyarrow Tables or "
                                            r"pandas DataFrames"):
        md.read_datasource(Lists()).take_all()
    with pytest.raises(DataTypeError, match=r"ReadBare \(read task 0, .*\) returned one Table; .*return \[block\]"):
        md.read_datasource(Bare()).take_all()
    with pytest.raises(UserFunctionError, match=r"ReadBroken \(read task 0.*ZeroDivisionError"):
        md.read_datasource(Broken()).take_all()


def test_bad_sources_and_metadata_are_refused_naming_the_fix():
    class NoTasks(Datasource):
        pass

    class NotAList(Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return pa.table({"a": [1]})

    with pytest.raises(InvalidTypeError, match="Datasource subclass"):
        md.read_datasource(object())
    with pytest.raises(InvalidTypeError, match=r"NoTasks.*implements no get_read_tasks"):
        md.read_datasource(NoTasks())
    with pytest.raises(InvalidTypeError, match=r"NotAList.get_read_tasks\(\d+\) returned a Table; return a list of "
                                               r"muster.data.ReadTask"):
        md.read_datasource(NotAList())
    with pytest.raises(InvalidArgumentError, match="override_num_blocks=0"):
        md.read_datasource(RangeDatasource(3), override_num_blocks=0)
    with pytest.raises(InvalidTypeError, match=r"size_bytes=1.5"):
        BlockMetadata(num_rows=1, size_bytes=1.5, exec_stats=None)
    assert BlockMetadata(1, 2, None, None).input_files is None  # Ray's field order: exec_stats third


class RecordingDatasink(Datasink):
    """Records its calls; ``fail_task`` makes that write task raise."""

    def __init__(self, fail_task=None, min_rows=None):
        self.fail_task, self.min_rows = fail_task, min_rows
        self.calls, self.lock = [], threading.Lock()

    def on_write_start(self, schema=None):
        self.calls.append(("start", schema))

    def write(self, blocks, ctx):
        blocks = list(blocks)
        if ctx.task_idx == self.fail_task:
            raise OSError("disk full")
        with self.lock:
            self.calls.append(("write", ctx.task_idx, [type(b) for b in blocks]))
        return sum(b.num_rows for b in blocks)

    def on_write_complete(self, write_result):
        self.calls.append(("complete", write_result))

    def on_write_failed(self, error):
        self.calls.append(("failed", error))

    @property
    def min_rows_per_write(self):
        return self.min_rows


def test_write_datasink_calls_the_sink_as_ray_does():
    sink = RecordingDatasink()
    assert md.range(10, override_num_blocks=3).write_datasink(sink) is None
    start, *writes, complete = sink.calls
    assert start == ("start", pa.schema([("id", pa.int64())]))
    assert sorted(w[1] for w in writes) == [0, 1, 2] and all(w[2] == [pa.Table] for w in writes)
    assert complete == ("complete", WriteResult(num_rows=10, size_bytes=80, write_returns=[4, 4, 2]))
    bundled = RecordingDatasink(min_rows=4)  # blocks gathered until a write has 4 rows or more, as in Ray
    md.range(10, override_num_blocks=5).write_datasink(bundled)
    assert bundled.calls[-1][1].write_returns == [4, 4, 2]
    empty = RecordingDatasink()  # no blocks: no on_write_start, an empty result (as in Ray)
    md.from_items([]).write_datasink(empty)
    assert empty.calls == [("complete", WriteResult(0, 0, []))]


class PerTaskStateDatasink(Datasink):
    """Keeps a write task's state on self, as Ray's sinks may: each of Ray's write tasks has its own copy."""

    def __init__(self):
        self.parts, self.both_started = {}, threading.Barrier(2, timeout=10)

    def write(self, blocks, ctx):
        self.out = self.parts.setdefault(ctx.task_idx, [])  # this task's part
        self.both_started.wait()  # both writes have set self.out before either uses it
        for b in blocks:
            self.out.extend(b.column("id").to_pylist())


def test_each_write_task_has_its_own_copy_of_the_sink():
    """Before: the tasks shared one sink on their threads, so both wrote to the part set last."""
    sink = PerTaskStateDatasink()
    md.range(6, override_num_blocks=2).write_datasink(sink, concurrency=2)
    assert sink.parts == {0: [0, 1, 2], 1: [3, 4, 5]}


def test_a_failing_write_reaches_on_write_failed_and_the_caller_naming_the_sink():
    sink = RecordingDatasink(fail_task=1)
    with pytest.raises(UserFunctionError, match=r"write_datasink\(RecordingDatasink\): RecordingDatasink.write "
                                                r"\(task 1, 2 rows\) failed: OSError: disk full") as info:
        md.range(6, override_num_blocks=3).write_datasink(sink)
    assert isinstance(info.value.__cause__, OSError)
    assert sink.calls[-1] == ("failed", info.value) and "complete" not in [c[0] for c in sink.calls]
    upstream = RecordingDatasink()  # the plan feeding the sink fails: on_write_failed gets that error
    with pytest.raises(UserFunctionError, match="ZeroDivisionError") as info:
        md.range(4).map(lambda r: {"x": 1 // (r["id"] - 2)}).write_datasink(upstream)
    assert upstream.calls[-1] == ("failed", info.value)
    with pytest.raises(InvalidArgumentError, match=r"RecordingDatasink.min_rows_per_write is 0"):
        md.range(2).write_datasink(RecordingDatasink(min_rows=0))
    with pytest.raises(InvalidTypeError, match="Datasink subclass"):
        md.range(2).write_datasink(object())


def test_ray_s_import_paths_and_the_ray_engine_call():
    import muster.data.block
    from muster.data import _ray_plan
    from muster.data.datasource.datasink import WriteResult as SinkResult
    from muster.data.datasource.datasource import ReadTask as SourceTask

    assert (md.Datasource, md.ReadTask, md.Datasink) == (Datasource, SourceTask, Datasink)
    assert SinkResult is WriteResult and muster.data.block.BlockMetadata is BlockMetadata
    assert md.datasource.Datasource is Datasource
    assert RangeDatasource(1).get_name() == "Range" and RecordingDatasink().get_name() == "Recording"
    source = RangeDatasource(4)
    (name, args, kwargs), = md.read_datasource(source, override_num_blocks=2)._node.op.ray.steps
    assert (name, args[0], kwargs) == ("read_datasource", source, {"override_num_blocks": 2})
    assert callable(_ray_plan.write_datasink)
    assert md.datasource.RowBasedFileDatasink is md.RowBasedFileDatasink  # Ray's two import paths
    with pytest.raises(UnsupportedRayAPIError, match=r"partitioning='hive'"):
        md.datasource.Partitioning


def test_frames_with_tensor_columns_become_tensor_blocks():
    import numpy as np

    class Images(Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            frame = pd.DataFrame({"image": [np.zeros((2, 2), np.uint8), np.ones((2, 2), np.uint8)]})
            return [ReadTask(lambda: [frame], BlockMetadata(2, None, None))]

    batch = md.read_datasource(Images()).take_batch(2)
    assert batch["image"].shape == (2, 2, 2) and batch["image"].dtype == np.uint8

"""On the Ray engine: a muster ``Datasource``/``Datasink`` as Ray's, so ``ray.data`` runs it.

The wrappers call the user's object for everything, converting muster's ``ReadTask``/
``BlockMetadata`` to Ray's on the way in, and Ray's ``TaskContext``/``WriteResult`` to muster's on
the way out; blocks reach the user's ``write`` as Arrow tables, as on muster's own engine.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa

from muster.data import _ray_guard
from muster.data.exceptions import DataError
from muster.data.datasource.datasink import Datasink, TaskContext, WriteResult, call_sink
from muster.data.datasource.datasource import Datasource, ReadTask, public_tasks, read_tasks


def ray_datasource(source: Datasource) -> Any:
    """``source`` as a ``ray.data.Datasource`` (for ``ray.data.read_datasource``)."""
    import ray.data
    from ray.data.block import BlockMetadata as RayMetadata

    def ray_task(task: Any, public: ReadTask, limit: int | None) -> Any:
        meta = public.metadata
        return ray.data.ReadTask(task.read, RayMetadata(num_rows=meta.num_rows, size_bytes=meta.size_bytes,
                                                        exec_stats=None, input_files=meta.input_files),
                                 schema=public.schema, per_task_row_limit=limit)

    class MusterDatasource(ray.data.Datasource):
        def __init__(self, inner: Datasource):
            super().__init__()
            self.inner = inner

        def get_name(self) -> str:
            return self.inner.get_name()

        def estimate_inmemory_data_size(self) -> int | None:
            try:
                return self.inner.estimate_inmemory_data_size()
            except NotImplementedError:
                return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            public = public_tasks(self.inner, parallelism, {})
            ours = read_tasks(self.inner, parallelism, {}, public)
            return [ray_task(t, p, per_task_row_limit) for t, p in zip(ours, public)]

    return MusterDatasource(source)


def ray_datasink(sink: Datasink) -> Any:
    """``sink`` as a ``ray.data.Datasink`` (for ``ray.data.Dataset.write_datasink``)."""
    import ray.data

    class MusterDatasink(ray.data.Datasink):
        def __init__(self, inner: Datasink):
            self.inner, self.name = inner, type(inner).__name__

        def get_name(self) -> str:
            return self.inner.get_name()

        def on_write_start(self, schema: pa.Schema | None = None) -> None:
            call_sink(self.name, "on_write_start", lambda: self.inner.on_write_start(schema))

        def write(self, blocks: Iterable[Any], ctx: Any) -> Any:
            task, tables = TaskContext(ctx.task_idx, ctx.op_name), list(_arrow(blocks))
            what = f"write (task {ctx.task_idx}, {sum(t.num_rows for t in tables)} rows)"
            return call_sink(self.name, what, lambda: self.inner.write(iter(tables), task))

        def on_write_complete(self, write_result: Any) -> None:
            result = WriteResult(int(write_result.num_rows), int(write_result.size_bytes),
                                 list(write_result.write_returns))
            call_sink(self.name, "on_write_complete", lambda: self.inner.on_write_complete(result))

        def on_write_failed(self, error: Exception) -> None:
            self.inner.on_write_failed(_carried(error))

        @property
        def supports_distributed_writes(self) -> bool:
            return self.inner.supports_distributed_writes

        @property
        def min_rows_per_write(self) -> int | None:
            return self.inner.min_rows_per_write

        @property
        def min_bytes_per_write(self) -> int | None:
            return self.inner.min_bytes_per_write

    return MusterDatasink(sink)


def _arrow(blocks: Iterable[Any]) -> Iterator[pa.Table]:
    """Ray's blocks (Arrow, or pandas where a source made pandas ones) as Arrow tables."""
    for block in blocks:
        yield block if isinstance(block, pa.Table) else pa.Table.from_pandas(block, preserve_index=False)


def _carried(error: Exception) -> Exception:
    """The muster error a Ray error carries (what ``write_datasink`` raises), else ``error`` itself."""
    try:
        _ray_guard.reraise(error)
    except DataError as found:
        return found
    return error

"""On the Ray engine: a join as a lazy ``ray.data`` read, run in a Ray worker when the dataset is.

Ray 2.60's own ``Dataset.join`` runs each partition's join on polars, which muster does not need (Ray
raises ``ImportError`` on its first partition without it). So a join becomes ``ray.data.read_datasource``
of a source with one read task; that task, in a Ray worker, runs the two inputs' ``ray.data`` plans and
joins them with ``combine.stream_join``: it holds one input, streams the other through, and yields the
joined blocks as it goes. Nothing runs until the dataset is (``iter_batches``' first batch, a
``streaming_split`` shard's, ``count``, a write), and the driver never holds an input or the output.
The task asks for no CPU: the inputs' own tasks, which it waits on, need them.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from muster.data import _ray_guard, combine
from muster.data.plan import Join


def join_dataset(op: Join, left: Any, right: Any, schema: pa.Schema | None) -> Any:
    """The lazy ``ray.data.Dataset`` of ``op`` joining the ``ray.data.Dataset``s ``left`` and ``right``
    (``schema``: the output's, when known before running)."""
    import ray.data
    from ray.data.block import BlockMetadata

    def run() -> Iterator[pa.Table]:
        yield from combine.stream_join(op, lambda: arrow_blocks(left), lambda: arrow_blocks(right))

    class JoinSource(ray.data.Datasource):
        def get_name(self) -> str:
            return op.name

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            return [ray.data.ReadTask(run, meta, schema=schema, per_task_row_limit=per_task_row_limit)]

    return ray.data.read_datasource(JoinSource(), override_num_blocks=1, num_cpus=0)


def arrow_blocks(ds: Any) -> Iterator[pa.Table]:
    """The blocks of ``ds`` (a ``ray.data.Dataset`` or ``DataIterator``), as Arrow tables on this process
    (a Ray error carrying a muster data error raised as that error)."""
    return _ray_guard.unwrapped(iter(ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1)))

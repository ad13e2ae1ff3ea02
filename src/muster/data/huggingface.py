"""``from_huggingface``: a Hugging Face ``datasets.Dataset`` or ``IterableDataset`` as a muster dataset.

A ``Dataset`` is Arrow already: its table, with the row selection of ``select``/``shuffle``/
``train_test_split``/``shard`` applied (``with_format("arrow")[:]``), becomes in-memory blocks, as Ray
does it. An ``IterableDataset`` streams: one read task iterates it in Arrow batches, each pass
afresh (as Ray's one read task does). Ray first tries the Hub's Parquet export over HTTP; here the
data is read from the object given, so nothing is downloaded.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pyarrow as pa

from muster.data.block import BlockMetadata
from muster.data.datasource.datasource import Datasource, ReadTask
from muster.exceptions import InvalidTypeError

#: rows per Arrow batch read from an IterableDataset
_BATCH_ROWS = 1024


class HuggingFaceDatasource(Datasource):
    """An ``IterableDataset``, read in one streaming task."""

    def __init__(self, dataset: Any, batch_size: int = _BATCH_ROWS):
        super().__init__()
        self._dataset, self._batch_size = dataset, batch_size

    def get_name(self) -> str:
        return "HuggingFace"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Any = None) -> list[ReadTask]:
        return [ReadTask(self._read, BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None),
                         per_task_row_limit=per_task_row_limit)]

    def _read(self) -> Iterator[pa.Table]:
        for batch in self._dataset.with_format("arrow").iter(batch_size=self._batch_size):
            if isinstance(batch, dict):  # some IterableDatasets ignore the format they are given
                batch = pa.table(batch)
            yield batch


def from_huggingface(dataset: Any, parallelism: int = -1, concurrency: Optional[int] = None,
                     override_num_blocks: Optional[int] = None) -> Any:
    """Rows of a Hugging Face ``datasets.Dataset`` (in memory) or ``datasets.IterableDataset`` (streamed).

    Raises:
        InvalidTypeError: a ``DatasetDict`` (pick a split: ``ds["train"]``) or something else.
    """
    import muster.data as md

    try:
        import datasets
    except ImportError as exc:
        raise InvalidTypeError(f"from_huggingface({type(dataset).__name__}): pass a datasets.Dataset or "
                               "IterableDataset (pip install datasets).") from exc
    num_blocks = md._num_blocks("from_huggingface", parallelism, override_num_blocks)
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise InvalidTypeError(f"from_huggingface: this {type(dataset).__name__} holds the splits "
                               f"{list(dataset.keys())}; pass one of them, e.g. "
                               f"from_huggingface(ds[{next(iter(dataset.keys()), 'train')!r}]).")
    if isinstance(dataset, datasets.IterableDataset):
        return md.read_datasource(HuggingFaceDatasource(dataset), override_num_blocks=num_blocks)
    if isinstance(dataset, datasets.Dataset):
        return md.from_arrow(dataset.with_format("arrow")[:], override_num_blocks=num_blocks)
    raise InvalidTypeError(f"from_huggingface({type(dataset).__name__}): pass a datasets.Dataset or "
                           "datasets.IterableDataset (for a DataFrame, from_pandas; for Arrow, from_arrow).")

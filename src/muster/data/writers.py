"""``write_parquet`` / ``write_csv`` / ``write_json``: one file per output block, to a folder or URL."""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator

import pyarrow as pa


def write_blocks(blocks: Iterator[pa.Table], path: str, filesystem: Any, ext: str,
                 write: Callable[[pa.Table, Any], None]) -> list[str]:
    import fsspec

    fs, root = (filesystem, path) if filesystem is not None else fsspec.core.url_to_fs(path)
    fs.makedirs(root, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    written = []
    for i, block in enumerate(blocks):
        if block.num_rows == 0:
            continue
        name = f"{root.rstrip('/')}/{tag}_{i:06d}.{ext}"
        with fs.open(name, "wb") as f:
            write(block, f)
        written.append(name)
    return written


def parquet_writer(**kwargs: Any) -> Callable[[pa.Table, Any], None]:
    import pyarrow.parquet as pq

    return lambda block, f: pq.write_table(block, f, **kwargs)


def csv_writer() -> Callable[[pa.Table, Any], None]:
    import pyarrow.csv as pcsv

    return lambda block, f: pcsv.write_csv(block, f)


def json_writer() -> Callable[[pa.Table, Any], None]:
    def write(block: pa.Table, f: Any) -> None:
        text = block.to_pandas().to_json(orient="records", lines=True)
        f.write(text.encode())

    return write

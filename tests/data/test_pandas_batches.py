"""Pandas batches' dtypes: numpy ones by default (Ray's conversion before 2.56), and with
``DataContext.enable_arrow_backed_pandas_conversion`` Ray 2.60's default, Arrow-backed columns, the same dtypes
Ray 2.60 gave for the same table (run under both and compared), in the driver, pooled workers and actors."""

from __future__ import annotations

import pyarrow as pa
import pytest

import muster.data as md
from muster.data import DataContext

#: Ray 2.60's pandas dtypes for _table() (take_batch, to_pandas and iter_batches alike)
_RAY_DTYPES = {"s": "string[pyarrow]", "l": "list<item: int64>[pyarrow]", "i": "int64[pyarrow]",
               "f": "double[pyarrow]", "b": "bool[pyarrow]", "ts": "timestamp[us][pyarrow]",
               "st": "struct<x: int64>[pyarrow]", "bin": "binary[pyarrow]", "i8": "int8[pyarrow]", "d": "category"}


def _table():
    return pa.table({"s": ["a", None, "c"], "l": [[1, 2], None, [3]], "i": [1, None, 3], "f": [1.0, None, 2.5],
                     "b": [True, None, False], "ts": pa.array([1, None, 3], pa.timestamp("us")),
                     "st": [{"x": 1}, None, {"x": 2}], "bin": [b"a", None, b"c"], "i8": pa.array([1, 2, 3], pa.int8()),
                     "d": pa.array(["u", None, "u"]).dictionary_encode()})


@pytest.fixture
def arrow_backed():
    ctx = DataContext.get_current()
    ctx.enable_arrow_backed_pandas_conversion = True
    yield
    ctx.enable_arrow_backed_pandas_conversion = False


def _dtypes(df):
    return {c: str(t) for c, t in df.dtypes.items()}


def dtypes_seen(df):
    """The batch's dtypes, as one string column (so the function's process reports what it got)."""
    import pandas as pd

    return pd.DataFrame({"seen": [repr(_dtypes(df))] * len(df)})


class DtypesSeen:
    def __call__(self, df):
        return dtypes_seen(df)


def test_arrow_backed_pandas_batches_have_rays_dtypes_wherever_they_are_made(arrow_backed):
    ds = md.from_arrow(_table())
    assert _dtypes(ds.take_batch(3, batch_format="pandas")) == _RAY_DTYPES
    assert _dtypes(ds.to_pandas()) == _RAY_DTYPES
    assert _dtypes(next(iter(ds.iter_batches(batch_format="pandas")))) == _RAY_DTYPES
    batch = ds.take_batch(3, batch_format="pandas")
    assert batch["i"].tolist()[0] == 1 and batch["i"].isna().tolist() == [False, True, False]
    # a function in the engine's pooled workers and a class in an actor pool see the consumer's setting
    for mapped in (ds.map_batches(dtypes_seen, batch_format="pandas"),
                   ds.map_batches(DtypesSeen, batch_format="pandas", concurrency=1)):
        assert {r["seen"] for r in mapped.take_all()} == {repr(_RAY_DTYPES)}
    # an integer column with nulls comes back from a pandas function as integers (numpy dtypes make it float)
    same = ds.map_batches(lambda df: df, batch_format="pandas").take_all()
    assert [r["i"] for r in same] == [1, None, 3] and md.from_items(same).schema().types[2] == pa.int64()


def test_by_default_pandas_batches_have_numpy_dtypes():
    batch = md.from_arrow(_table()).take_batch(3, batch_format="pandas")
    assert {c: _dtypes(batch)[c] for c in ("i", "f", "l", "i8")} == {"i": "float64", "f": "float64", "l": "object",
                                                                    "i8": "int8"}
    assert md.range(4).add_column("odd", lambda df: df["id"] % 2).take_all()[3] == {"id": 3, "odd": 1}

"""Small gaps to Ray 2.60, each checked by running one script under Ray 2.60 and muster: the Arrow type of an
``add_column`` pandas function's result, and ``ExecutionResources`` being immutable and hashable."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import muster.data as md
from muster.exceptions import InvalidArgumentError

R = md.ExecutionResources


def _people():
    return md.from_arrow(pa.table({"id": [0, 1, 2, 3], "name": ["n0", "n1", "n2", "n3"]}))  # one block


def test_add_column_pandas_results_have_rays_arrow_types():
    """Ray assigns the result into the pandas batch (``batch.loc[:, col] = ...``) and pyarrow converts the typed
    column: pandas 3 text (``str``) is ``large_string``, as in Ray's ``map_batches(batch_format="pandas")``.
    muster went through numpy, so its text was ``string``, nullable ``Int64`` became float64 with NaN and a
    category plain text."""
    ds = _people()
    text = ds.add_column("s", lambda df: df["id"].astype(str))
    assert [str(t) for t in text.schema().types] == ["int64", "string", "large_string"]
    assert text.take_batch(batch_format="pyarrow").schema.field("s").type == pa.large_string()
    assert text.take_all()[1] == {"id": 1, "name": "n1", "s": "1"}
    for made in (lambda df: [f"x{i}" for i in df["id"]], lambda df: np.array([f"x{i}" for i in df["id"]])):
        assert ds.add_column("s", made).schema().types[2] == pa.large_string()  # pandas infers str, as Ray's
    objects = ds.add_column("s", lambda df: pd.Series([f"x{i}" for i in df["id"]], dtype=object))
    assert objects.schema().types[2] == pa.string()  # an object column: Python strings, as Ray's
    nullable = ds.add_column("n", lambda df: pd.Series([None if i % 2 == 0 else i for i in df["id"]], dtype="Int64"))
    assert nullable.schema().types[2] == pa.int64() and [r["n"] for r in nullable.take_all()] == [None, 1, None, 3]
    category = ds.add_column("c", lambda df: pd.Series(["a", "b", "a", "b"], dtype="category"))
    assert category.schema().types[2] == pa.dictionary(pa.int8(), pa.large_string())
    # unchanged: numbers, tensors, map's Python strings (string, as Ray's) and map_batches' pandas text
    assert ds.add_column("f", lambda df: df["id"] * 1.5).schema().types[2] == pa.float64()
    tensors = ds.add_column("t", lambda df: [np.zeros(2) for _ in range(len(df))])
    assert str(tensors.schema().types[2]) == "ArrowTensorTypeV2(shape=(2,), dtype=double)"
    assert ds.map(lambda r: {"s": f"x{r['id']}"}).schema().types == [pa.string()]
    mapped = ds.map_batches(lambda df: df.assign(s=[f"x{i}" for i in df["id"]]), batch_format="pandas")
    assert mapped.schema().types[2] == pa.large_string()


def test_execution_resources_are_immutable_and_hashable_with_rays_values():
    """Ray 2.60's ``ExecutionResources`` has read-only amounts (setting one raises ``AttributeError``), is
    hashable, and rounds as its scheduler does; muster's was a mutable, unhashable dataclass."""
    r = R(cpu=1, gpu=2, object_store_memory=300, memory=400)
    with pytest.raises(AttributeError, match=r"ExecutionResources.cpu = 5: .*immutable.*copy\(cpu=5\)"):
        r.cpu = 5
    with pytest.raises(AttributeError):
        r.foo = 1  # no such attribute, as Ray's
    assert r.cpu == 1 and r.copy(cpu=7) == R(cpu=7, gpu=2, object_store_memory=300, memory=400) and r.cpu == 1
    assert hash(r) == hash(R(cpu=1, gpu=2, object_store_memory=300, memory=400)) and len({r, r.copy()}) == 1
    assert r != R(cpu=1) and r != None  # noqa: E711 - Ray's raises AttributeError here; muster's says unequal
    assert R.zero() is R.zero() and R.inf() is R.inf() and R(cpu=None) == R.zero()
    # Ray 2.60's values for the same calls
    assert (R(cpu=0.1 + 0.2).cpu, R(gpu=1 / 3).gpu, R(memory=1.7).memory) == (0.3, 0.33333, 2.0)
    assert R().to_resource_dict() == {"CPU": 0.0, "GPU": 0.0, "object_store_memory": 0, "memory": 0}
    assert R.for_limits(cpu=2).to_resource_dict() == {"CPU": 2, "GPU": math.inf, "object_store_memory": math.inf,
                                                      "memory": math.inf}
    assert r.add(R(cpu=0.5)) == R(cpu=1.5, gpu=2, object_store_memory=300, memory=400)
    assert r.subtract(R(cpu=3)).cpu == -2 and r.min(R(cpu=0.5, gpu=9)) == R(cpu=0.5, gpu=2)
    assert r.satisfies_limit(R.for_limits(cpu=1)) and not r.satisfies_limit(R.for_limits(cpu=0.5))
    assert R(cpu=1).scale(math.inf) == R(cpu=math.inf)  # an amount of 0 stays 0 (it was nan)
    with pytest.raises(InvalidArgumentError, match=r"scale\(-1\)"):
        r.scale(-1)
    assert R(cpu=7).floordiv(R(cpu=0.1)).cpu == 70 and R(memory=-2048).memory_str() == "-2048.0B"
    assert pickle.loads(pickle.dumps(r)) == r and copy.deepcopy(r) == r


def test_resource_limits_change_by_assigning_a_copy_as_in_ray():
    """``ctx.execution_options.resource_limits.cpu = 8`` raises in Ray 2.60 (it changed muster's context);
    assigning a copy works, and an amount a limit does not give is unlimited, as Ray's setter keeps it."""
    from muster.data import DataConfig

    ctx = md.DataContext()
    with pytest.raises(AttributeError, match="immutable"):
        ctx.execution_options.resource_limits.cpu = 8
    assert ctx.execution_options.resource_limits == R.inf()
    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(cpu=8)
    assert ctx.execution_options.resource_limits == R.for_limits(cpu=8)
    ctx.execution_options.resource_limits = R(cpu=3)
    assert ctx.execution_options.resource_limits == R.for_limits(cpu=3)
    assert md.ExecutionOptions(resource_limits=R(cpu=8, gpu=0)).resource_limits == R.for_limits(cpu=8, gpu=0)
    options = DataConfig.default_ingest_options()
    with pytest.raises(AttributeError, match="object_store_memory"):
        options.resource_limits.object_store_memory = 10e9

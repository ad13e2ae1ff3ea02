"""The plan's ``ray.data`` equivalents, checked without a cluster.

tests/cluster/test_conformance_data_serve.py runs them on Ray.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import muster.data as md
from muster.data import _ray_plan
from muster.data.plan import Limit, Node, RayCall, Union
from muster.exceptions import InvalidArgumentError


def _calls(node: Node) -> list[str]:
    """Every step name of the plan, sources first (a union's inputs in order)."""
    out = [name for n in node.inputs for name in _calls(n)]
    op = node.op
    if isinstance(op, Limit):
        return [*out, "limit"]
    if isinstance(op, Union):
        return [*out, "union"]
    assert isinstance(op.ray, RayCall), f"{op.name} has no ray.data call: {op.ray!r}"
    return [*out, *(name for name, _, _ in op.ray.steps)]


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, batch):
        return {"id": batch["id"] * self.k}


def test_every_transform_records_its_ray_data_call():
    ds = (md.range(10).map(lambda r: {"id": r["id"], "k": r["id"] % 2})
          .map_batches(lambda b: b, batch_size=4, concurrency=2, num_cpus=0.5)
          .flat_map(lambda r: [r, r]).filter(lambda r: r["id"] > 1)
          .add_column("v", lambda df: df["id"] * 2).rename_columns({"v": "w"}).drop_columns(["w"])
          .select_columns(["id", "k"]).limit(8).union(md.from_items([{"id": 1, "k": 0}]))
          .random_shuffle(seed=1).randomize_block_order(seed=2).repartition(2).sort("id"))
    assert _calls(ds._node) == [
        "range", "map", "map_batches", "flat_map", "filter", "add_column", "rename_columns", "drop_columns",
        "select_columns", "limit", "from_arrow", "union", "random_shuffle", "randomize_block_order", "repartition",
        "sort",
    ]
    assert _calls(ds.groupby("k").sum("id")._node)[-2:] == ["groupby", "sum"]
    assert _calls(ds.groupby("k").map_groups(lambda g: g)._node)[-2:] == ["groupby", "map_groups"]
    batches = ds._node
    while not (isinstance(getattr(batches.op, "ray", None), RayCall) and batches.op.ray.steps[0][0] == "map_batches"):
        batches = batches.inputs[0]
    _, _, kwargs = batches.op.ray.steps[0]
    assert kwargs["batch_size"] == 4 and kwargs["concurrency"] == 2 and kwargs["num_cpus"] == 0.5


def test_sources_pass_their_options(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2], "b": [3, 4]}), tmp_path / "x.parquet")
    ds = md.read_parquet(str(tmp_path), columns=["a"], filter=pc.field("a") > 1)
    (name, args, kwargs), = ds._node.op.ray.steps
    assert name == "read_parquet" and args == (str(tmp_path),) and kwargs["columns"] == ["a"] and "filter" in kwargs
    assert "lines" not in md.read_json(str(tmp_path / "x.parquet"))._node.op.ray.steps[0][2]  # Ray's default
    assert md.read_json(str(tmp_path / "x.parquet"), lines=True)._node.op.ray.steps[0][2]["lines"] is True


def test_concurrency_becomes_rays_compute_strategy():
    ray = pytest.importorskip("ray")
    import ray.data

    pool = _ray_plan._compute(Scale, (1, 3), "MapBatches(Scale)")
    assert isinstance(pool, ray.data.ActorPoolStrategy) and (pool.min_size, pool.max_size) == (1, 3)
    assert isinstance(_ray_plan._compute(lambda b: b, 2, "MapBatches(<lambda>)"), ray.data.TaskPoolStrategy)
    assert _ray_plan._clean({"fn_args": (), "fn_kwargs": None, "batch_size": 4, "seed": None}) == {"batch_size": 4}


def test_an_operator_without_a_ray_equivalent_names_itself_and_the_fix():
    op = md.range(5).filter(expr=pc.field("id") > 2)._node.op
    with pytest.raises(InvalidArgumentError,
                       match=r"Filter\(col\('id'\) > 2\) cannot run on the Ray engine.*pass a function"):
        _ray_plan._steps(op)


def test_the_embedded_engine_is_not_ray():
    assert not _ray_plan.on_ray_engine()


def test_expressions_replay_on_ray_as_rays_own():
    """with_column(s) and filter(expr=) with muster's expressions record Ray's call; the expressions become
    ray.data.expressions' (the same tree Ray builds from the same script)."""
    rx = pytest.importorskip("ray.data.expressions")
    from muster.data._ray_exprs import to_ray
    from muster.data.expressions import col, unnest

    (name, args, _), = md.range(3).with_column("z", col("id") * 2)._node.op.ray.steps
    assert name == "with_columns" and to_ray(args[0])["z"].structurally_equals(rx.col("id") * 2)
    (name, args, _), = md.range(3).with_columns({"a": col("id") + 1}, unnest(col("s")))._node.op.ray.steps
    assert to_ray(args[1]).structurally_equals(rx.unnest(rx.col("s")))
    (name, _, kwargs), = md.range(3).filter(expr=col("id").is_in([1]) & ~col("x").is_null())._node.op.ray.steps
    assert name == "filter" and to_ray(kwargs["expr"]).structurally_equals(
        rx.col("id").is_in([1]) & ~rx.col("x").is_null())

    steps = md.range(4).groupby("id").with_column("z", col("id") + 1)._node.op.ray.steps
    assert [s[0] for s in steps] == ["groupby", "with_column"] and steps[1][1][0] == "z"
    assert to_ray(steps[1][1][1]).structurally_equals(rx.col("id") + 1)


def test_random_and_monotonic_ids_replay_on_ray_as_rays_own():
    rx = pytest.importorskip("ray.data.expressions")
    from muster.data._ray_exprs import to_ray
    from muster.data.expressions import monotonically_increasing_id, random

    assert to_ray(random(seed=3, reseed_after_execution=False)).structurally_equals(
        rx.random(seed=3, reseed_after_execution=False))
    assert not to_ray(random(seed=3)).structurally_equals(rx.random(seed=4))
    assert isinstance(to_ray(monotonically_increasing_id()), rx.MonotonicallyIncreasingIdExpr)

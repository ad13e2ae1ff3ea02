"""One behaviour, two engines: every test here runs on the embedded engine and on a Ray cluster.

muster.data (on Ray: ray.data datasets, Ray's streaming split) feeding a
TorchTrainer, transforms, custom sources and sinks, user-function errors, and
a Serve replica's logs must look the same to user code whichever engine runs them.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

import numpy as np
import pytest
import torch

import muster.train as train
from muster.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


# -- muster.data on both engines (on Ray: ray.data datasets, Ray's streaming split) ------
def _write_parquet_parts(folder, parts=3, rows=60):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder)
    for p in range(parts):
        ids = np.arange(p * rows, (p + 1) * rows)
        pq.write_table(pa.table({"id": ids, "x": ids.astype("float32") / 10}), os.path.join(folder, f"part{p}.parquet"))
    return [i for i in range(parts * rows) if i % 7 != 0]  # the rows the seed pipeline's filter keeps


def _seed_loop(config):
    """The seed's loop: each epoch iterates this rank's shard with iter_torch_batches; rank 1 dies once
    after epoch 0 (its checkpoint committed), so epoch 1 runs in a resumed gang."""
    import torch.distributed as dist

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    shard, val, mixed = (train.get_dataset_shard(n) for n in ("train", "val", "shuffled"))
    start = 0
    if train.get_checkpoint() is not None:
        with train.get_checkpoint().as_directory() as folder:
            start = torch.load(os.path.join(folder, "epoch.pt"))["epoch"] + 1
    for epoch in range(start, 2):
        ids, batches = [], 0
        for batch in shard.iter_torch_batches(batch_size=8):
            assert isinstance(batch["x"], torch.Tensor) and len(batch["id"]) <= 8
            ids += batch["id"].tolist()
            batches += 1
        seen = sorted(int(r["id"]) for r in val.iter_rows())
        shuffled = [int(x) for b in mixed.iter_torch_batches(batch_size=4) for x in b["id"]]
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch}, os.path.join(tmp, "epoch.pt"))
            train.report({"epoch": epoch, "ids": ids, "batches": batches, "val": seen, "shuffled": shuffled},
                         checkpoint=Checkpoint.from_directory(tmp))
        dist.barrier()
        if rank == 1 and epoch == 0 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # rank 0 waits here for rank 1: no epoch 1 in the gang that loses it


@pytest.mark.timeout(300)  # two gangs and three ray.data pipelines; alone, it also pays the cluster's start
def test_seed_pipeline_streams_exact_shards_into_the_trainer(engine, storage, tmp_path):
    """read_parquet -> map -> filter -> TorchTrainer(datasets=...): each epoch every kept row reaches
    exactly one rank, ranks get equal batch counts, the unsplit dataset gives every rank all rows,
    a shuffled split dataset drops its odd row to stay equal, and a gang that lost a worker resumes
    with the next epoch."""
    import muster.data as md
    from muster.train import DataConfig

    kept = _write_parquet_parts(str(tmp_path / "in"))
    ds = (md.read_parquet(str(tmp_path / "in"))
          .map(lambda row: {"id": row["id"], "x": row["x"] * 2})
          .filter(lambda row: row["id"] % 7 != 0))
    shuffled = md.range(41).map_batches(lambda b: {"id": b["id"] * 10}).random_shuffle(seed=3)
    marker = str(tmp_path / "killed")
    result = TorchTrainer(
        _seed_loop, train_loop_config={"marker": marker},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": ds, "val": md.range(10), "shuffled": shuffled},
        dataset_config=DataConfig(datasets_to_split=["train", "shuffled"]),
        run_config=RunConfig(storage_path=storage, name=f"seed_{engine}", verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert result.error is None and os.path.exists(marker)
    assert sorted((r["_attempt"], r["epoch"]) for r in result.all_reports) == [(0, 0), (0, 0), (1, 1), (1, 1)]
    for epoch in (0, 1):
        reports = [r for r in result.all_reports if r["epoch"] == epoch]
        shards = [r["ids"] for r in reports]
        assert sorted(shards[0] + shards[1]) == kept  # every kept row once, on one rank
        assert len(shards[0]) == len(shards[1]) == len(kept) // 2
        assert reports[0]["batches"] == reports[1]["batches"] == -(-len(kept) // 2 // 8)
        assert all(r["val"] == list(range(10)) for r in reports)  # unsplit: all rows on every rank
        mixed = [r["shuffled"] for r in reports]
        assert [len(m) for m in mixed] == [20, 20]  # 41 rows: one dropped so that both ranks get 20
        assert len(set(mixed[0] + mixed[1])) == 40 and set(mixed[0] + mixed[1]) <= {i * 10 for i in range(41)}
    # muster reshuffles per epoch from (seed, epoch), across the resume too; Ray repeats one order
    if engine == "local":
        ranked = sorted(result.all_reports, key=lambda r: r["_rank"])
        assert [r["shuffled"] for r in ranked if r["epoch"] == 0] != [r["shuffled"] for r in ranked if r["epoch"] == 1]


@pytest.mark.timeout(240)  # six ray.data pipelines on a loaded machine; alone, it also pays the cluster's start
def test_dataset_transforms_and_consumption(engine, tmp_path):
    """The same plan gives the same answers on both engines; on Ray, ray.data's workers run the UDFs."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import muster.data as md
    from muster.exceptions import InvalidArgumentError

    class AddBase:
        def __init__(self, base):
            self.base = base

        def __call__(self, batch):
            import ray

            worker = ray._private.worker.global_worker
            in_ray_task = ray.is_initialized() and worker.mode == ray._private.worker.WORKER_MODE
            return {**batch, "w": batch["v"] + self.base, "on_ray": [in_ray_task] * len(batch["v"])}

    class AddOneRow:  # row-wise ops with a callable class (defined here: Ray's workers get it by value)
        def __init__(self, base):
            self.base = base

        def __call__(self, row):
            return {**row, "v": row["v"] + self.base}

    class KeepOdd:
        def __call__(self, row):
            return row["v"] % 2 == 1

    ds = md.from_items([{"k": i % 3, "v": i} for i in range(30)])
    assert ds.count() == 30
    assert sorted(r["v"] for r in ds.limit(4).union(ds.limit(2)).take_all()) == [0, 0, 1, 1, 2, 3]
    sums = ds.groupby("k").sum("v").sort("k", descending=True).take_all()
    assert [(r["k"], r["sum(v)"]) for r in sums] == [(2, 155), (1, 145), (0, 135)]
    spread = ds.groupby("k").std(["v"]).sort("k").take_all()
    want = [round(float(np.std(range(k, 30, 3), ddof=1)), 6) for k in range(3)]
    assert [round(r["std(v)"], 6) for r in spread] == want
    assert ds.max(["k", "v"]) == {"max(k)": 2, "max(v)": 29}
    from muster.data.aggregate import Count, Mean

    assert ds.aggregate(Count(), Mean("v", alias_name="avg")) == {"count()": 30, "avg": 14.5}
    tagged = ds.map(AddOneRow, fn_constructor_args=(1000,), concurrency=1).filter(KeepOdd, concurrency=1)
    assert sorted(r["v"] for r in tagged.take_all()) == list(range(1001, 1030, 2))
    cols = ds.add_column("u", lambda df: df["v"] * 2).drop_columns(["k"]).rename_columns({"u": "twice"})
    # (on Ray, blocks come back in the order they finish, Ray's preserve_order=False: sort to pick the first two)
    assert cols.sort("v").take(2) == [{"v": 0, "twice": 0}, {"v": 1, "twice": 2}]
    sizes = [len(b["v"]) for b in ds.filter(lambda r: r["v"] >= 10).iter_batches(batch_size=7)]
    assert sorted(sizes) == [6, 7, 7]
    mapped = ds.map_batches(AddBase, fn_constructor_args=(100,), batch_size=8, concurrency=1)
    files = mapped.drop_columns(["k"]).write_parquet(str(tmp_path / "out"))
    written = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("v")
    assert written.column("w").to_pylist() == [v + 100 for v in range(30)]
    assert set(written.column("on_ray").to_pylist()) == {engine == "ray"}  # Ray's workers ran the class
    expr = ds.filter(expr=pc.field("v") > 25)
    if engine == "ray":
        with pytest.raises(InvalidArgumentError, match=r"Filter\(col\('v'\) > 25\).*no ray.data equivalent"):
            expr.count()
    else:
        assert expr.count() == 4


@pytest.mark.timeout(240)
def test_a_custom_datasource_and_datasink_on_both_engines(engine):
    """read_datasource's tasks and write_datasink's writes run on the engine (Ray's tasks on Ray, each
    with its pid); the sink's callbacks run in the driver; a failing write reaches on_write_failed."""
    import pyarrow as pa

    import muster.data as md
    from muster.data.block import BlockMetadata
    from muster.data.exceptions import UserFunctionError

    class Squares(md.Datasource):
        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            step = -(-15 // parallelism)  # 15 rows, in about ``parallelism`` tasks
            return [md.ReadTask(lambda lo=lo: [pa.table({"x": [i * i for i in range(lo, min(15, lo + step))]})],
                                BlockMetadata(min(15, lo + step) - lo, None, None, input_files=[f"part-{lo}"]))
                    for lo in range(0, 15, step)]

    class Sink(md.Datasink):
        def __init__(self, fail=False):
            self.fail, self.events = fail, []

        def on_write_start(self, schema=None):
            self.events.append("start")

        def write(self, blocks, ctx):
            if self.fail:
                raise OSError("disk full")
            return [(ctx.task_idx, x, os.getpid()) for b in blocks for x in b.column("x").to_pylist()]

        def on_write_complete(self, write_result):
            self.events.append(("complete", write_result.num_rows, write_result.write_returns))

        def on_write_failed(self, error):
            self.events.append(("failed", isinstance(error, UserFunctionError)))

    ds = md.read_datasource(Squares(), override_num_blocks=3)
    assert ds.count() == 15 and sorted(r["x"] for r in ds.take_all()) == [i * i for i in range(15)]
    sink = Sink()
    assert ds.map(lambda r: {"x": r["x"] + 1}).write_datasink(sink) is None
    assert sink.events[0] == "start" and sink.events[1][:2] == ("complete", 15)
    written = [w for task in sink.events[1][2] for w in task]
    assert sorted(x for _, x, _ in written) == [i * i + 1 for i in range(15)]
    assert ({pid for _, _, pid in written} == {os.getpid()}) == (engine == "local")
    failing = Sink(fail=True)
    with pytest.raises(UserFunctionError, match=r"Sink.write \(task \d+, \d+ rows\) failed: OSError: disk full"):
        ds.write_datasink(failing)
    assert failing.events[-1] == ("failed", True)  # on Ray: a RayTaskError(UserFunctionError)


@pytest.mark.timeout(240)
def test_user_function_errors_are_musters_on_both_engines(engine):
    """A UDF that raises names the operator, the function and the batch's first row; a map that returns a
    non-dict says what came back; on Ray these cross Ray's workers and come back as muster's errors."""
    import muster.data as md
    from muster.data.exceptions import DataTypeError, UserFunctionError

    class _Exploding:
        """Fails on the batch holding id 7 (runs in an actor pool on either engine)."""

        def __call__(self, batch):
            if 7 in batch["id"]:
                raise KeyError("no weights for 7")
            return batch

    def invert(row):
        return {"id": row["id"], "inv": 1 // (row["id"] - 3)}

    with pytest.raises(UserFunctionError, match=r"Map failed in .*invert: ZeroDivisionError.*first row: \{'id': "):
        md.range(10).map(invert).take_all()
    with pytest.raises(DataTypeError, match=r"returned a int \(\d\); it must return a dict"):
        md.range(4).map(lambda row: row["id"]).take_all()
    with pytest.raises(UserFunctionError, match=r"MapBatches failed in .*_Exploding: KeyError.*"
                                                r"first row: \{'id': "):
        md.range(20).map_batches(_Exploding, batch_size=5, concurrency=1).take_all()


def test_a_restored_shard_position_resumes_without_error(engine):
    """muster's own engine resumes an epoch at the first batch not yet handed out; on Ray the epoch's
    stream starts over (as in Ray Train); either way the resumed pass runs to its end."""
    import muster.data as md

    ds = md.range(40)
    it = ds.streaming_split(1)[0]
    passes = it.iter_batches(batch_size=10)
    first = [next(passes)["id"].tolist() for _ in range(2)]
    state = it.state_dict()
    passes.close()
    assert state["in_pass"] and state["position"] == 2
    again = ds.streaming_split(1)[0]
    again.load_state_dict(state)
    rest = [int(x) for b in again.iter_batches(batch_size=10) for x in b["id"]]
    if engine == "local":
        assert sorted(rest + [x for b in first for x in b]) == list(range(40)) and len(rest) == 20
    else:
        assert sorted(rest) == list(range(40))


# -- serve ------------------------------------------------------------------------------
def test_serve_replica_logs_reach_the_store(engine, tmp_path, monkeypatch):
    """What a replica prints (in its constructor and per request) is in the run store, under its number."""
    import httpx

    from muster import serve
    from muster.observe.store.reader import StoreReader

    monkeypatch.setenv("MUSTER_STORAGE_PATH", str(tmp_path))

    @serve.deployment(ray_actor_options={"num_cpus": 0.5})
    class Talker:
        def __init__(self):
            print(f"talker up on {engine}", flush=True)

        def __call__(self, request):
            print(f"talker served x={request.query_params['x']}", flush=True)
            return {"pid": os.getpid()}

    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        port = serve.status().http["port"]
        serve.run(Talker.bind(), name="talk", route_prefix="/talk")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            pid = c.get("/talk", params={"x": 7}).json()["pid"]
        reader = StoreReader.for_root(str(tmp_path))
        want = {f"talker up on {engine}", "talker served x=7"}
        deadline = time.monotonic() + 30
        rows: list = []
        while time.monotonic() < deadline:
            rows = reader.serve_logs(reader.find_serve("talk"))
            if want <= {r["line"] for r in rows}:
                break
            time.sleep(0.2)
        got = {r["line"]: r for r in rows}
        assert want <= set(got), [r["line"] for r in rows]
        assert {(got[w]["deployment"], got[w]["replica"], got[w]["pid"]) for w in want} == {("Talker", 0, pid)}
    finally:
        serve.shutdown()

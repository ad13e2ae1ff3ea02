"""``map_batches(CallableClass, concurrency=...)`` on a pool of real actor processes; functions with
``concurrency=`` bounded; never waiting for CPUs a gang holds."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

import muster.data as md
from muster.core import api
from muster.exceptions import ResourcesUnavailableError


class Tagger:
    """Adds ``k`` and tags each row with the pid that mapped it; records each construction in a folder."""

    def __init__(self, k, folder=None, delay=0.0):
        self.k, self.delay = k, delay
        if folder is not None:
            with open(os.path.join(folder, f"{os.getpid()}-{id(self)}"), "w"):
                pass

    def __call__(self, batch):
        if self.delay:
            time.sleep(self.delay)
        return {"id": batch["id"], "y": batch["id"] * 2 + self.k, "pid": [os.getpid()] * len(batch["id"])}


def constructions(folder):
    return [int(name.split("-")[0]) for name in os.listdir(folder)]


def test_fixed_pool_builds_each_actor_once_and_matches_in_process(tmp_path, threads_only):
    built = tmp_path / "built"
    built.mkdir()
    base = md.range(300, override_num_blocks=12)
    pooled = base.map_batches(Tagger, fn_constructor_args=(5,), fn_constructor_kwargs={"folder": str(built)},
                              concurrency=2, batch_size=25).take_all()
    pids = constructions(built)
    assert len(pids) == 2 and len(set(pids)) == 2  # two actors, each built exactly once
    assert os.getpid() not in pids  # real actor processes, not this one
    assert {r["pid"] for r in pooled} == set(pids)  # both actors mapped blocks
    local = base.map_batches(Tagger, fn_constructor_args=(5,), batch_size=25).take_all()  # no concurrency: threads
    assert {r["pid"] for r in local} == {os.getpid()}
    strip = lambda rows: [(r["id"], r["y"]) for r in rows]  # noqa: E731
    assert strip(pooled) == strip(local) == [(i, 2 * i + 5) for i in range(300)]  # same rows, same order


def test_min_max_pool_scales_up_with_the_queue(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    ds = md.range(240, override_num_blocks=24).map_batches(
        Tagger, fn_constructor_args=(0,), fn_constructor_kwargs={"folder": str(built), "delay": 0.05},
        concurrency=(1, 3), batch_size=10)
    rows = ds.take_all()
    pids = constructions(built)
    assert len(pids) == len(set(pids))  # every actor built once
    assert 2 <= len(pids) <= 3  # started at 1, grew with the queue, never past max
    assert {r["pid"] for r in rows} <= set(pids) and len({r["pid"] for r in rows}) >= 2
    assert [r["y"] for r in rows] == [2 * i for i in range(240)]
    assert f"{len(pids)} actors" in ds.stats()


def test_unordered_pool_gives_the_same_rows(tmp_path):
    ctx = md.DataContext.get_current()
    ctx.execution_options.preserve_order = False  # Ray's spelling
    assert ctx.preserve_order is False
    try:
        rows = md.range(100, override_num_blocks=10).map_batches(Tagger, fn_constructor_args=(1,),
                                                                 concurrency=2).take_all()
    finally:
        ctx.preserve_order = True
    assert sorted(r["y"] for r in rows) == [2 * i + 1 for i in range(100)]


def test_more_cpus_than_the_machine_fails_at_once_naming_both():
    total = api.get_runtime().resources()["CPU"]
    with pytest.raises(ResourcesUnavailableError) as info:
        md.range(10).map_batches(Tagger, fn_constructor_args=(0,), concurrency=1, num_cpus=64).take_all()
    msg = str(info.value)
    assert "map_batches(Tagger, concurrency=1, num_cpus=64)" in msg and f"CPU={int(total)}" in msg
    assert f"ask for at most {int(total)} CPUs with its num_cpus=" in msg, msg


def double(batch):
    return {"id": batch["id"] * 2}


def _each_fails_at_once(cases):
    """(name, message) of each case's ResourcesUnavailableError, each raised within seconds of running it."""
    for named, make in cases.items():
        t = time.monotonic()
        with pytest.raises(ResourcesUnavailableError) as info:
            make().take_all()
        assert time.monotonic() - t < 30
        yield named, str(info.value)


def test_a_function_asking_for_more_cpus_than_exist_fails_at_once_naming_the_fix():
    """A function (or a class without a pool) given num_cpus= above the engine's CPUs ran anyway; Ray waits for
    them forever. Each fails now, naming the value, the CPUs there are and the fix; as many as exist run."""
    total = int(api.get_runtime().resources()["CPU"])
    asked = total * 16
    cases = {
        f"map_batches(double, num_cpus={asked})": lambda: md.range(4).map_batches(double, num_cpus=asked),
        f"map(<lambda>, num_cpus={asked})": lambda: md.range(4).map(lambda r: r, num_cpus=asked),
        f"filter(<lambda>, num_cpus={asked})": lambda: md.range(4).filter(lambda r: True, num_cpus=asked),
        f"map_batches(Tagger, num_cpus={asked})": lambda: md.range(4).map_batches(Tagger, fn_constructor_args=(0,),
                                                                                 num_cpus=asked),
    }
    for named, msg in _each_fails_at_once(cases):
        assert named in msg and f"CPU={asked}" in msg and f"CPU={total} in total" in msg, msg
        assert f"ask for at most {total} CPUs with its num_cpus=" in msg and "muster.init(num_cpus=N)" in msg, msg
    assert md.range(4).map_batches(double, num_cpus=total).take_all() == [{"id": 2 * i} for i in range(4)]


def test_a_function_asking_for_gpus_the_machine_lacks_fails_at_once_naming_the_fix():
    """A function (or a class without a pool) given num_gpus= ran on the CPU silently while a pool of the
    same class failed at once; Ray would wait for the GPUs forever. Every row op says what to do now."""
    gpus = int(api.get_runtime().resources().get("GPU", 0))
    asked = gpus + 1
    cases = {
        f"map_batches(double, num_gpus={asked})": lambda: md.range(4).map_batches(double, num_gpus=asked),
        f"map(<lambda>, num_gpus={asked})": lambda: md.range(4).map(lambda r: r, num_gpus=asked),
        f"flat_map(<lambda>, num_gpus={asked})": lambda: md.range(4).flat_map(lambda r: [r], num_gpus=asked),
        f"filter(<lambda>, num_gpus={asked})": lambda: md.range(4).filter(lambda r: True, num_gpus=asked),
        f"map_batches(Tagger, num_gpus={asked})": lambda: md.range(4).map_batches(Tagger, fn_constructor_args=(0,),
                                                                                 num_gpus=asked),
        f"map_batches(Tagger, concurrency=1, num_gpus={asked})": lambda: md.range(4).map_batches(
            Tagger, fn_constructor_args=(0,), concurrency=1, num_gpus=asked),
    }
    for named, msg in _each_fails_at_once(cases):
        assert named in msg and f"GPU={asked}" in msg and f"GPU={gpus}" in msg, msg
        if gpus == 0:
            assert "drop num_gpus= (or pass num_gpus=0) to run it on the CPU" in msg, msg
    assert md.range(4).map_batches(double, num_gpus=0).take_all() == [{"id": 2 * i} for i in range(4)]


def test_a_gpu_function_before_the_engine_starts_is_checked_against_this_machine(tmp_path):
    import subprocess
    import sys

    script = ("import muster, muster.data as md\n"
              "try:\n"
              "    md.range(3).map_batches(lambda b: b, num_gpus=1).take_all()\n"
              "except muster.exceptions.ResourcesUnavailableError as e:\n"
              "    print('REFUSED', muster.is_initialized(), e)\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", MUSTER_PRELOAD="")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("REFUSED False map_batches(<lambda>, num_gpus=1): "), out.stdout + out.stderr
    assert "GPU=0" in out.stdout and "drop num_gpus=" in out.stdout


class Exploder:
    def __call__(self, batch):
        if int(batch["id"][0]) >= 10:
            raise ValueError("bad batch in an actor")
        return batch


class BadInit:
    def __init__(self):
        raise RuntimeError("no model file")

    def __call__(self, batch):
        return batch


def test_actor_udf_error_names_operator_function_and_first_row():
    with pytest.raises(md.UserFunctionError) as info:
        md.range(30).map_batches(Exploder, concurrency=2, batch_size=5).take_all()
    msg = str(info.value)  # range(30) on 4 CPUs: 8 blocks of 4 rows, bundled by two into 8 rows, batched by 5:
    # 0-4, 5-7, 8-12, then 13-15 is the first batch that starts at 10 or more
    assert "MapBatches" in msg and "Exploder" in msg and "{'id': 13}" in msg and "bad batch in an actor" in msg
    with pytest.raises(md.UserFunctionError, match=r"MapBatches \(constructor\) failed in BadInit.*no model file"):
        md.range(3).map_batches(BadInit, concurrency=1).take_all()


class Hog:
    def ping(self):
        return os.getpid()


def test_pool_falls_back_to_threads_while_a_gang_holds_every_cpu(caplog):
    rt = api.get_runtime()
    gang = rt.create_gang(int(rt.resources()["CPU"]), Hog, {"CPU": 1})
    try:
        with caplog.at_level(logging.INFO, logger="muster.data"):
            rows = md.range(50, override_num_blocks=5).map_batches(Tagger, fn_constructor_args=(3,),
                                                                    concurrency=2).take_all()
    finally:
        for member in gang:
            rt.kill(member)
    assert [r["y"] for r in rows] == [2 * i + 3 for i in range(50)]
    assert {r["pid"] for r in rows} == {os.getpid()}  # ran here, not in actors
    assert any("none of {CPU=1} is free now" in r.getMessage() for r in caplog.records)


def test_function_concurrency_bounds_tasks_at_once(threads_only):
    lock = threading.Lock()
    now, peak = [0], [0]

    def slow(batch):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        return batch

    ctx = md.DataContext.get_current()
    saved, ctx.max_threads = ctx.max_threads, 4
    try:
        for limit in (1, 2):
            peak[0] = 0
            out = md.range(80, override_num_blocks=16).map_batches(slow, concurrency=limit).take_all()
            assert [r["id"] for r in out] == list(range(80))
            assert 1 <= peak[0] <= limit
        peak[0] = 0
        md.range(80, override_num_blocks=16).map_batches(slow, num_cpus=2).take_all()  # 4 threads / 2 CPUs
        assert 1 <= peak[0] <= 2
    finally:
        ctx.max_threads = saved


class DiesOnce:
    """SIGKILLs its own actor process on the block starting at row 40, the first time only."""

    def __init__(self, marker):
        self.marker = marker

    def __call__(self, batch):
        import signal

        if int(batch["id"][0]) == 40 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return {"id": batch["id"], "pid": [os.getpid()] * len(batch["id"])}


def test_a_killed_actor_leaves_the_pool_and_its_block_reruns_here(tmp_path, caplog):
    marker = str(tmp_path / "killed")
    with caplog.at_level(logging.WARNING, logger="muster.data"):
        rows = md.range(100, override_num_blocks=10).map_batches(DiesOnce, fn_constructor_args=(marker,),
                                                                 concurrency=2, batch_size=None).take_all()
    assert os.path.exists(marker)  # an actor really died
    assert [r["id"] for r in rows] == list(range(100))  # nothing lost, order kept
    assert any("died" in r.getMessage() for r in caplog.records)


def test_chained_pools_a_map_after_and_an_early_stop(threads_only):
    ds = (md.range(60, override_num_blocks=6)
          .map_batches(Tagger, fn_constructor_args=(1,), concurrency=1)
          .map_batches(Tagger, fn_constructor_args=(0,), concurrency=(1, 2))  # y = 2 * id again
          .filter(lambda r: r["id"] % 2 == 0))
    assert [r["y"] for r in ds.take_all()] == [2 * i for i in range(0, 60, 2)]
    assert [r["id"] for r in ds.take(3)] == [0, 2, 4]  # stops early; its actors are stopped (leak check)


class RowTagger:
    """A callable class for the row-wise ops: ``map``, ``flat_map`` and ``filter``."""

    def __init__(self, k):
        self.k = k

    def __call__(self, row):
        return {"id": row["id"], "y": row["id"] + self.k, "pid": os.getpid()}


class Twice:
    def __call__(self, row):
        return [row, row]


class Even:
    def __call__(self, row):
        return row["id"] % 2 == 0


def test_row_ops_take_a_callable_class_on_a_pool_or_threads():
    """Ray's map/flat_map/filter take a callable class (built with fn_constructor_args, pooled with
    concurrency= or Ray's older compute=ActorPoolStrategy); before, muster called the class per row."""
    base = md.range(40, override_num_blocks=4)
    pooled = base.map(RowTagger, fn_constructor_args=(100,), concurrency=2).take_all()
    assert [(r["id"], r["y"]) for r in pooled] == [(i, i + 100) for i in range(40)]
    assert os.getpid() not in {r["pid"] for r in pooled}  # mapped in actor processes
    threaded = base.map(RowTagger, fn_constructor_kwargs={"k": 1}).take_all()  # no concurrency=: threads here
    assert {r["pid"] for r in threaded} == {os.getpid()} and threaded[3]["y"] == 4
    assert base.flat_map(Twice, compute=md.ActorPoolStrategy(size=1)).count() == 80
    assert [r["id"] for r in base.filter(Even, concurrency=1).take_all()] == list(range(0, 40, 2))
    by_strategy = base.map_batches(Tagger, fn_constructor_args=(0,),
                                   compute=md.ActorPoolStrategy(min_size=1, max_size=2))
    assert [r["y"] for r in by_strategy.take_all()] == [2 * i for i in range(40)]
    with pytest.raises(ValueError, match="applies only when fn is a callable class"):
        base.map(lambda r: r, fn_constructor_args=(1,))
    with pytest.raises(ValueError, match="pass one of the two"):
        base.map_batches(Tagger, compute=md.ActorPoolStrategy(size=1), concurrency=1)
    with pytest.raises(ValueError, match=r"ActorPoolStrategy\(size=0"):
        md.ActorPoolStrategy(size=0)


class TorchModel:
    """A model as Ray's batch-inference guide builds one (torch runs in the actor)."""

    def __init__(self):
        import torch

        self.model = torch.nn.Linear(4, 1)

    def __call__(self, batch):
        import torch

        with torch.inference_mode():
            self.model(torch.ones(len(batch["id"]), 4))
        return {"id": batch["id"], "pid": [os.getpid()] * len(batch["id"])}


def test_a_pool_right_after_another_gets_its_actors(caplog):
    """Ray's batch-inference guide runs pools back to back. Before, the second started while the
    first one's killed actors still held their CPUs, and ran short or in the driver's threads."""
    ds = md.range(8, override_num_blocks=4)
    with caplog.at_level(logging.WARNING, logger="muster.data"):
        for _ in range(2):
            pids = {r["pid"] for r in ds.map_batches(TorchModel, concurrency=4).take_all()}  # every CPU
            assert os.getpid() not in pids  # mapped in the pool's actors
    assert not [r for r in caplog.records if "free now" in r.getMessage()]

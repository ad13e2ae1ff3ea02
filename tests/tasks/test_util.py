"""``muster.util``: ActorPool, queue.Queue, placement groups and scheduling strategies, node address."""

from __future__ import annotations

import threading

import pytest
from _task_helpers import TIMEOUT

import muster
from muster.exceptions import ResourcesUnavailableError, UnsupportedRayAPIError, UnsupportedRayImportError
from muster.util import ActorPool, get_node_ip_address, placement_group, remove_placement_group
from muster.util.queue import Empty, Full, Queue
from muster.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@muster.remote
class Doubler:
    def double(self, v):
        return 2 * v


def test_actor_pool_map_in_order_unordered_and_submit():
    actors = [Doubler.remote(), Doubler.remote()]
    try:
        pool = ActorPool(actors)
        assert list(pool.map(lambda a, v: a.double.remote(v), range(7))) == [0, 2, 4, 6, 8, 10, 12]
        assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), [1, 2, 3])) == [2, 4, 6]
        for v in (10, 20, 30):  # more values than actors: the third waits for a free actor
            pool.submit(lambda a, v: a.double.remote(v), v)
        assert not pool.has_free()
        assert [pool.get_next(timeout=TIMEOUT) for _ in range(3)] == [20, 40, 60]
        assert not pool.has_next() and pool.has_free()
        idle = pool.pop_idle()
        assert idle is not None
        pool.push(idle)
        with pytest.raises(StopIteration):
            pool.get_next()
    finally:
        for a in actors:
            muster.kill(a)


@muster.remote
def produce(q, n):
    for i in range(n):
        q.put(i)
    return n


def test_queue_shared_by_driver_and_tasks():
    q = Queue(maxsize=3)
    try:
        assert q.empty() and not q.full()
        ref = produce.remote(q, 5)  # blocks on the full queue until the driver takes items
        got = [q.get(timeout=TIMEOUT) for _ in range(5)]
        assert got == [0, 1, 2, 3, 4] and muster.get(ref, timeout=TIMEOUT) == 5
        with pytest.raises(Empty):
            q.get_nowait()
        with pytest.raises(Empty):
            q.get(timeout=0.05)
        q.put_nowait_batch([7, 8, 9])
        assert q.full() and q.qsize() == 3
        with pytest.raises(Full):
            q.put_nowait(10)
        with pytest.raises(Full):
            q.put(10, timeout=0.05)
        assert q.get_nowait_batch(2) == [7, 8] and q.get_nowait() == 9
    finally:
        q.shutdown()


@muster.remote(num_cpus=1)
def in_group():
    return "ran"


def test_placement_group_feasible_infeasible_and_strategy():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    assert muster.get(pg.ready(), timeout=TIMEOUT) == pg and pg.wait(1)  # Ray resolves it to the group
    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=1)
    assert muster.get(in_group.options(scheduling_strategy=strategy).remote(), timeout=TIMEOUT) == "ran"
    remove_placement_group(pg)
    too_big = placement_group([{"CPU": 3}, {"CPU": 3}])
    with pytest.raises(ResourcesUnavailableError, match="2 bundles together"):
        muster.get(too_big.ready(), timeout=TIMEOUT)
    assert not too_big.wait(0.1)
    with pytest.raises(ResourcesUnavailableError, match="STRICT_SPREAD"):
        muster.get(placement_group([{"CPU": 1}] * 2, strategy="STRICT_SPREAD").ready(), timeout=TIMEOUT)
    with pytest.raises(ValueError, match="strategy='TIGHT'"):
        placement_group([{"CPU": 1}], strategy="TIGHT")
    with pytest.raises(ValueError, match="bundle_index=5"):
        PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=5)


@muster.remote
def group_id(depth=0):
    """The id of the group this task runs in, and of the group a child it starts runs in."""
    from muster.util.placement_group import get_current_placement_group

    pg = get_current_placement_group()
    child = muster.get(group_id.remote(depth + 1)) if depth == 0 else None
    return (pg.id if pg is not None else None), (child[0] if child else None)


@muster.remote
class GroupMember:
    def group(self):
        from muster.util.placement_group import get_current_placement_group

        pg = get_current_placement_group()
        return pg.id if pg is not None else None


def test_get_current_placement_group_inside_tasks_actors_and_captured_children():
    """Ray's placement-group guide: the group a task or actor was scheduled into; children join it
    only with placement_group_capture_child_tasks=True. Before, it was None everywhere."""
    from muster.util.placement_group import get_current_placement_group

    pg = placement_group([{"CPU": 1}])
    assert get_current_placement_group() is None  # the driver is in no group
    plain = PlacementGroupSchedulingStrategy(placement_group=pg)
    capturing = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=True)
    assert muster.get(group_id.remote(), timeout=TIMEOUT) == (None, None)
    assert muster.get(group_id.options(scheduling_strategy=plain).remote(), timeout=TIMEOUT) == (pg.id, None)
    assert muster.get(group_id.options(scheduling_strategy=capturing).remote(), timeout=TIMEOUT) == (pg.id, pg.id)
    assert muster.get(group_id.options(placement_group=pg).remote(), timeout=TIMEOUT) == (pg.id, None)
    member = GroupMember.options(scheduling_strategy=plain).remote()
    try:
        assert muster.get(member.group.remote(), timeout=TIMEOUT) == pg.id
    finally:
        muster.kill(member)
    remove_placement_group(pg)


def test_node_ip_and_unsupported_names_say_what_to_use():
    ip = get_node_ip_address()
    assert ip.count(".") == 3
    assert muster.nodes()[0]["NodeManagerAddress"] == ip
    import muster.util as util

    with pytest.raises(UnsupportedRayAPIError, match=r"muster.util.collective .*torch.distributed"):
        util.collective
    with pytest.raises(UnsupportedRayAPIError, match=r"muster.timeline .*muster dashboard"):
        muster.timeline
    with pytest.raises(AttributeError, match="no attribute 'not_a_ray_name'"):
        muster.not_a_ray_name

    @muster.remote
    def f(x):
        return x

    @muster.remote
    class A:
        pass

    with pytest.raises(UnsupportedRayAPIError, match=r"RemoteFunction.bind .*pass its ObjectRef to the next"):
        f.bind(1)  # Ray's DAG API: a bare AttributeError before
    with pytest.raises(UnsupportedRayAPIError, match=r"ActorClass.bind .*Cls.remote"):
        A.bind()


def test_from_imports_of_unsupported_ray_names_name_the_equivalent_too():
    """``from ray.train import X`` is how ported scripts meet a missing name; Python turns the
    AttributeError of a module's __getattr__ there into a bare "cannot import name"."""
    with pytest.raises(UnsupportedRayImportError, match=r"muster.train.SyncConfig .*storage_path"):
        from muster.train import SyncConfig  # noqa: F401
    with pytest.raises(ImportError, match=r"TransformersTrainer .*TorchTrainer.*prepare_trainer"):
        from muster.train.huggingface import TransformersTrainer  # noqa: F401
    with pytest.raises(ImportError, match=r"muster.timeline .*muster dashboard"):
        from muster import timeline  # noqa: F401
    with pytest.raises(ImportError, match=r"muster.serve.llm.LoraConfig .*one LLMConfig per model"):
        from muster.serve.llm import LoraConfig  # noqa: F401
    with pytest.raises(ImportError, match=r"muster.data.from_spark .*from_pandas"):
        from muster.data import from_spark  # noqa: F401
    with pytest.raises(ImportError, match="cannot import name 'not_a_ray_name'"):
        from muster.util import not_a_ray_name  # noqa: F401
    import muster.train as train

    assert not hasattr(train, "SyncConfig") and not hasattr(train.huggingface, "TransformersTrainer")
    from muster.train.huggingface import transformers  # the package's own submodule still imports

    assert transformers.__name__ == "muster.train.huggingface.transformers"
    assert muster.util.queue.Queue is Queue  # Ray's module layout, reached as attributes


def test_queue_async_methods_wait_fetch_local_and_more_named_gaps():
    import asyncio

    q = Queue()

    async def round_trip():
        await q.put_async({"x": 1})
        return await q.get_async(timeout=TIMEOUT)

    assert asyncio.run(round_trip()) == {"x": 1}
    q.shutdown()
    refs = [muster.put(1)]
    assert muster.wait(refs, fetch_local=True) == (refs, [])  # Ray's keyword: accepted
    with pytest.raises(UnsupportedRayAPIError, match=r"muster.util.dask .*no muster equivalent"):
        muster.util.dask


class _Locked:
    """Holds a lock: plain pickle refuses it."""

    def __init__(self, x, rebuilt=False):
        self.x, self.rebuilt, self.lock = x, rebuilt, threading.Lock()


@muster.remote
def _locked_fields(obj):
    return obj.x, obj.rebuilt, type(obj.lock).__name__


def test_register_serializer_sends_what_pickle_refuses_until_deregistered():
    """Ray's ray.util.register_serializer (it was missing)."""
    from muster.util import deregister_serializer, register_serializer

    with pytest.raises(TypeError, match="cannot pickle '_thread.lock'.*register_serializer"):
        _locked_fields.remote(_Locked(1))
    register_serializer(_Locked, serializer=lambda obj: obj.x, deserializer=lambda x: _Locked(x, rebuilt=True))
    try:
        assert muster.get(_locked_fields.remote(_Locked(2)), timeout=60) == (2, True, "lock")
        assert muster.get(muster.put(_Locked(3)), timeout=60).rebuilt
    finally:
        deregister_serializer(_Locked)
    with pytest.raises(TypeError, match="cannot pickle '_thread.lock'.*register_serializer"):
        _locked_fields.remote(_Locked(1))
    with pytest.raises(TypeError, match="pass a function"):
        register_serializer(_Locked, serializer="x", deserializer=lambda x: x)


@muster.remote
def _nap(seconds, value):
    import time

    time.sleep(seconds)
    return value


def test_as_completed_and_map_unordered_yield_as_tasks_finish():
    """Ray's ray.util.as_completed / map_unordered (before: AttributeError)."""
    from muster.util import as_completed, map_unordered

    refs = [_nap.remote(1.5, "slow"), _nap.remote(0.0, "fast")]
    assert list(as_completed(refs, chunk_size=1)) == ["fast", "slow"]
    assert list(as_completed([_nap.remote(0, 1)], yield_obj_refs=True))[0].__class__.__name__ == "ObjectRef"
    pulled = []

    def items():
        for i in range(6):
            pulled.append(i)
            yield i

    @muster.remote
    def square(x):
        return x * x

    results = map_unordered(square, items(), backpressure_size=2, chunk_size=1)
    first = next(results)
    assert len(pulled) == 2 and first in (0, 1)  # two in flight, then one result before the third is sent
    assert sorted([first, *results]) == [0, 1, 4, 9, 16, 25]
    with pytest.raises(muster.exceptions.InvalidArgumentError, match=r"chunk_size=0"):
        list(as_completed(refs, chunk_size=0))
    with pytest.raises(muster.exceptions.InvalidArgumentError, match=r"num_returns.*chunk_size="):
        list(as_completed(refs, num_returns=2))
    assert muster.util.log_once("k") and not muster.util.log_once("k")


def test_inspect_serializability_names_the_part_that_fails():
    """Ray's ray.util.inspect_serializability (before: muster's unsupported-API error)."""
    import io

    from muster.util import inspect_serializability

    lock = threading.Lock()

    class Holder:
        def __init__(self):
            self.guard, self.n = lock, 1

    held = Holder()

    def uses_it(x):
        return x + held.n

    report = io.StringIO()
    ok, failures = inspect_serializability(uses_it, name="uses_it", print_file=report)
    assert not ok and {(f.name, type(f.obj).__name__, type(f.parent).__name__) for f in failures} == {
        ("guard", "lock", "Holder")}
    text = report.getvalue()
    assert "held (Holder): FAILS" in text and "guard (lock): FAILS: TypeError: cannot pickle '_thread.lock'" in text
    assert "make these inside the function" in text
    assert inspect_serializability(lambda: 1, print_file=io.StringIO()) == (True, set())

"""Objects: ``put``, ``wait``, and big arrays/tensors crossing process boundaries.

Big buffers travel out of band (pickle protocol 5): the message carries no
copy of them, and what a task receives is a writable array of its own, not a read-only view. What the
driver's ``get`` returns is read-only, as Ray's: it is the stored value itself, which later gets and tasks see.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest
import torch
from _task_helpers import TIMEOUT

import muster
from muster.core.local import wire


@muster.remote
def identity(x):
    return x


@muster.remote
def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


@muster.remote
def when_released(release, value):
    """``value`` once the test writes ``release`` (at most 60 s): not ready until then, however slow the box."""
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


@muster.remote
def add_one_in_place(array):
    array += 1  # fails on a read-only array
    return array


@muster.remote
def describe(array):
    return array.shape, array.dtype.str, float(array[::1_000_003].sum()), bool(array.flags.writeable)


# -- put ------------------------------------------------------------------------------
def test_put_returns_a_ref_that_tasks_and_get_accept():
    ref = muster.put({"weights": [1, 2, 3]})
    assert isinstance(ref, muster.ObjectRef)
    assert muster.get(ref) == {"weights": [1, 2, 3]}
    assert muster.get(identity.remote(ref), timeout=TIMEOUT) == {"weights": [1, 2, 3]}


def test_put_stores_a_copy_taken_at_put_time():
    array = np.zeros(1_000_000)
    ref = muster.put(array)
    array[:] = 7  # changing the caller's array afterwards does not change the object
    assert muster.get(describe.remote(ref), timeout=TIMEOUT)[2] == 0.0
    assert muster.get(ref)[0] == 0.0


# -- lifetime -------------------------------------------------------------------------
def _freed(weak, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while weak() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    return weak() is None


@pytest.fixture
def no_cyclic_gc():
    """Values must go when their last ref does, by reference counting alone.

    A reference cycle would keep a big result until the cyclic collector
    happened to run, and memory would grow meanwhile.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _stored(ref):
    """The driver's stored value behind ``ref`` (get hands out read-only views of its arrays, not the array)."""
    muster.get(ref, timeout=TIMEOUT)
    return ref.future().result()


def test_a_value_is_freed_once_no_ref_to_it_is_left(no_cyclic_gc):
    result = identity.remote(np.ones(1_000_000))
    from_task = weakref.ref(_stored(result))
    stored = muster.put(np.ones(1_000_000))
    from_put = weakref.ref(_stored(stored))
    chained = identity.remote(identity.remote(muster.put(np.ones(1_000_000))))  # a dependency, a temporary ref
    from_chain = weakref.ref(_stored(chained))
    assert from_task() is not None and from_put() is not None  # the refs keep them
    del result, stored, chained
    assert _freed(from_task) and _freed(from_put) and _freed(from_chain), "a value outlived its last ref"


@muster.remote
class Stash:
    def keep(self, refs):
        self.refs = refs  # refs nested in a list arrive as refs

    def first(self):
        return muster.get(self.refs[0])


def test_a_ref_held_by_a_worker_outlives_the_drivers_refs():
    stash = Stash.remote()
    try:
        ref = muster.put(np.arange(10))
        muster.get(stash.keep.remote([ref]), timeout=TIMEOUT)
        value = weakref.ref(_stored(ref))
        del ref
        gc.collect()
        assert value() is not None
        assert muster.get(stash.first.remote(), timeout=TIMEOUT).tolist() == list(range(10))
    finally:
        muster.kill(stash)


# -- arguments are taken when .remote() is called (as in Ray) -----------------------------
@muster.remote
def first_item(x):
    return x[0]


@muster.remote(num_cpus=4)
def hold_every_cpu(release):
    while not os.path.exists(release):
        time.sleep(0.01)


@muster.remote
class Keeper:
    def __init__(self, items):
        self.items = items

    def first(self, x):
        return self.items[0], x[0]


def test_arguments_are_captured_at_remote_time_even_while_the_task_waits(tmp_path):
    release = str(tmp_path / "release")
    blocker = hold_every_cpu.remote(release)  # every task below waits for a CPU
    try:
        buf, items = np.zeros(3), [0]
        refs = []
        for i in range(5):
            buf[:] = i  # one buffer reused for every call
            items[0] = i
            refs.append((first_item.remote(buf), first_item.remote(items)))
        keeper = Keeper.remote(items)
        items[0] = "changed"
        call = keeper.first.remote(buf)
        buf[:] = -1
    finally:
        open(release, "w").close()
    try:
        assert muster.get([r for pair in refs for r in pair], timeout=TIMEOUT) == [i for i in range(5) for _ in (0, 1)]
        assert muster.get(call, timeout=TIMEOUT) == (4, 4.0)
        muster.get(blocker, timeout=TIMEOUT)
    finally:
        muster.kill(keeper)


def test_unserializable_argument_fails_at_remote_time():
    with pytest.raises(TypeError, match="first_item.remote"):
        first_item.remote(threading.Lock())


# -- wait -----------------------------------------------------------------------------
def test_wait_returns_ready_and_not_ready_in_input_order(tmp_path):
    # slow ends when the test releases it: a 1.5 s sleep could end before the waits below on a loaded box, where
    # fast's worker can start a second after slow's (then both were ready, or slow first)
    release = str(tmp_path / "release")
    slow, fast = when_released.remote(release, "slow"), sleep_then.remote(0.0, "fast")
    try:
        ready, not_ready = muster.wait([slow, fast], num_returns=1, timeout=TIMEOUT)
        assert ready == [fast] and not_ready == [slow]

        ready, not_ready = muster.wait([slow, fast], num_returns=2, timeout=0.2)
        # num_returns=2 is met only once slow finishes: slow still not ready means the timeout ended the wait
        assert ready == [fast] and not_ready == [slow]
    finally:
        open(release, "w").close()

    ready, not_ready = muster.wait([slow, fast], num_returns=2, timeout=TIMEOUT)
    assert ready == [slow, fast] and not_ready == []
    assert muster.get([slow, fast]) == ["slow", "fast"]


def test_wait_rejects_more_returns_than_refs():
    with pytest.raises(ValueError, match="num_returns=3"):
        muster.wait([muster.put(1)], num_returns=3)
    with pytest.raises(ValueError, match=r"num_returns=0\): use a number from 1"):  # as Ray (it returned at once)
        muster.wait([muster.put(1)], num_returns=0)


# -- big data -------------------------------------------------------------------------
def test_50mb_array_round_trip_is_correct_and_read_only_as_rays():
    array = np.arange(50 * 1024 * 1024 // 8, dtype=np.float64)
    ref = add_one_in_place.remote(array)
    back = muster.get(ref, timeout=TIMEOUT)
    assert back.shape == array.shape and back.dtype == array.dtype
    assert back[0] == 1.0 and back[-1] == array[-1] + 1 and np.array_equal(back - 1, array)
    assert array[0] == 0.0  # the task changed its own copy, not the caller's memory
    # read-only, as Ray's: it was the stored value itself, so a change reached every later get and task
    with pytest.raises(ValueError, match="read-only"):
        back[:10] = -1
    mine = back.copy()
    mine[:10] = -1  # a copy is the caller's to change
    assert muster.get(ref, timeout=TIMEOUT)[0] == 1.0 and muster.get(describe.remote(ref), timeout=TIMEOUT)[3]


def test_what_get_returns_cannot_change_the_stored_value():
    """The driver's get returned the stored object: changing it changed what the next get and the ref's tasks
    saw (Ray's get gives read-only arrays and new containers)."""
    ref = muster.put({"a": np.zeros(3), "items": [np.ones(2)], "n": 1})
    got = muster.get(ref)
    for array in (got["a"], got["items"][0]):
        with pytest.raises(ValueError, match="assignment destination is read-only"):
            array[0] = 5
    got["n"], got["new"] = 2, True
    got["items"].append(0)
    assert muster.get(ref)["n"] == 1 and "new" not in muster.get(ref) and len(muster.get(ref)["items"]) == 1


def test_array_put_once_reaches_a_task_intact():
    array = np.random.default_rng(0).standard_normal(8 * 1024 * 1024).astype(np.float32)
    ref = muster.put(array)
    shape, dtype, checksum, writable = muster.get(describe.remote(ref), timeout=TIMEOUT)
    assert shape == array.shape and dtype == array.dtype.str
    assert checksum == pytest.approx(float(array[::1_000_003].sum()))
    assert writable


def test_tensor_round_trip_keeps_dtype_shape_and_values():
    tensor = torch.randn(1024, 2048)  # 8 MB
    back = muster.get(identity.remote(tensor), timeout=TIMEOUT)
    assert isinstance(back, torch.Tensor) and back.dtype == torch.float32 and back.shape == tensor.shape
    assert torch.equal(back, tensor)
    back.mul_(2)  # writable storage (no "non-writable buffer" warning path)
    assert torch.equal(back, tensor * 2)
    # Non-contiguous views, bfloat16 and grad-tracking tensors take other paths; still correct.
    for t in (tensor.t()[:, ::2], tensor.to(torch.bfloat16), torch.ones(3, requires_grad=True)):
        got = muster.get(identity.remote(t), timeout=TIMEOUT)
        assert got.dtype == t.dtype and torch.equal(got.detach(), t.detach())


def test_state_dict_of_a_model_round_trips():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    state = muster.get(identity.remote(model.state_dict()), timeout=TIMEOUT)
    clone = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    clone.load_state_dict(state)
    x = torch.randn(4, 64)
    assert torch.equal(clone(x), model(x))


def test_big_buffers_travel_out_of_band_without_a_copy():
    array = np.ones(4 * 1024 * 1024, dtype=np.float32)  # 16 MB
    body, buffers = wire.dumps(("call", 0, "__task__", (array,), {}))
    assert len(body) < 4096, "the array was copied into the pickle stream"
    assert len(buffers) == 1
    assert np.shares_memory(np.frombuffer(buffers[0].raw(), dtype=np.uint8), array)

    tensor = torch.ones(1024, 1024)
    body, buffers = wire.dumps((tensor,))
    assert len(body) < 4096 and len(buffers) == 1
    assert np.shares_memory(np.frombuffer(buffers[0].raw(), dtype=np.uint8), tensor.numpy())


def test_cluster_resources_inside_a_task_are_the_drivers():
    """A task asking for the resources sees the driver's engine, not a new one of its own."""
    import muster

    @muster.remote
    def ask():
        return muster.cluster_resources(), muster.available_resources()

    total, free = muster.get(ask.remote())
    assert total == muster.cluster_resources()
    assert free["CPU"] <= total["CPU"] - 1  # the asking task itself holds one CPU


def test_cluster_resources_show_rays_memory_entries_in_bytes():
    """Ray's "memory" and "object_store_memory": bytes, as floats, sized from this machine's memory
    (30% of what was free for the object store, as a Ray node does); muster reserves neither, so
    the free amounts are the totals."""
    import psutil

    import muster

    total, free = muster.cluster_resources(), muster.available_resources()
    memory, store = total["memory"], total["object_store_memory"]
    assert isinstance(memory, float) and isinstance(store, float)
    assert 0 < store < memory < psutil.virtual_memory().total
    assert abs(store / (memory + store) - 0.3) < 0.01 or store >= 1e10  # capped by /dev/shm or 200 GB
    assert free["memory"] == memory and free["object_store_memory"] == store


def test_a_big_put_value_reaches_tasks_as_private_writable_copies():
    """A put array (shared memory underneath) is sent by descriptor; each task may write its own copy."""
    import numpy as np

    import muster

    @muster.remote
    def bump(a):
        a[0] += 1
        return float(a[0]), bool(a.flags.writeable)

    ref = muster.put(np.zeros(1_000_000))  # 8 MB: above the shared-memory threshold
    assert muster.get([bump.remote(ref), bump.remote(ref)]) == [(1.0, True), (1.0, True)]
    assert muster.get(ref)[0] == 0.0  # the driver's value is untouched


def _inode_under(array) -> int:
    """The shared-memory file under an array that crossed the wire (its mmap's descriptor)."""
    from muster.core.serialization import ReceivedBuffer, SharedBuffer

    base = array
    while not isinstance(base, ReceivedBuffer | SharedBuffer):
        base = base.obj if isinstance(base, memoryview) else base.base
    return os.fstat(base.fd).st_ino


def test_an_unchanged_argument_is_passed_back_without_a_copy_and_a_changed_one_is_copied():
    """A task returning the big array it was given (untouched) sends back the same shared file;
    one that wrote a single element sends a copy with that change, and the put value stays."""

    @muster.remote
    def touch(a, write):
        if write:
            a[123_456] = -1.0
        return a

    array = np.random.default_rng(1).standard_normal(2_000_000)  # 16 MB
    ref = muster.put(array)
    same = muster.get(touch.remote(ref, False), timeout=TIMEOUT)
    assert np.array_equal(same, array) and not same.flags.writeable  # read-only, as Ray's
    assert _inode_under(same) == _inode_under(muster.get(ref))  # passed back, not copied
    changed = muster.get(touch.remote(ref, True), timeout=TIMEOUT)
    assert changed[123_456] == -1.0 and np.array_equal(np.delete(changed, 123_456), np.delete(array, 123_456))
    assert _inode_under(changed) != _inode_under(same)
    mine = same.copy()
    mine[0] = 42.0  # a copy is the caller's: neither the put value nor a later task sees it
    assert muster.get(ref)[0] == array[0]
    assert muster.get(touch.remote(ref, False), timeout=TIMEOUT)[0] == array[0]


def test_a_function_sent_by_value_keeps_its_file_for_tracebacks(tmp_path):
    """Code from a script (not importable by workers) travels by value with its file name, so a
    remote traceback shows the user's source lines (cloudpickle alone sends '<dynamic-code>')."""
    import pickle
    import traceback

    from muster.core import serialization

    path = tmp_path / "user_script.py"
    path.write_text("def outer():\n    def inner():\n        raise ValueError('from the user')\n    return inner\n")
    namespace = {"__name__": "a_script_workers_cannot_import"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    body, buffers = serialization.dumps(namespace["outer"])
    outer = pickle.loads(body, buffers=buffers)
    assert outer is not namespace["outer"] and outer.__code__.co_filename == str(path)
    inner = outer()
    with pytest.raises(ValueError) as info:
        inner()
    shown = "".join(traceback.format_exception(info.value))
    assert f'File "{path}", line 3, in inner' in shown and "raise ValueError('from the user')" in shown, shown


@muster.remote
def _square(x):
    return x * x


@muster.remote
def _key_error():
    raise KeyError("missing")


@muster.remote
class _AsyncUser:
    async def run(self):
        import asyncio

        one = await _square.remote(3)
        many = await asyncio.gather(*[_square.remote(i) for i in range(4)])
        wrapped = await asyncio.wrap_future(_square.remote(5).future())  # ref.future() in a worker
        wrapped += await _square.remote(1).as_future()
        try:
            await _key_error.remote()
            caught = False
        except KeyError:
            caught = True
        return one, many, wrapped, caught


def test_refs_are_awaitable_in_the_driver_and_in_async_actors():
    """Ray's asyncio guides await refs; before, `await ref` was a TypeError and ref.future()
    failed in a worker ("not known in this process")."""
    import asyncio

    async def driver():
        actor = _AsyncUser.remote()
        try:
            in_actor = await actor.run.remote()
        finally:
            muster.kill(actor)
        with pytest.raises(KeyError):
            await _key_error.remote()
        return in_actor, await _square.remote(7), await asyncio.gather(_square.remote(1), _square.remote(2))

    assert asyncio.run(asyncio.wait_for(driver(), TIMEOUT)) == ((9, [0, 1, 4, 9], 26, True), 49, [1, 4])


def test_as_future_is_an_asyncio_future_of_the_value_or_the_error_as_rays():
    """Ray's asyncio guide: ``await ref.as_future()``; muster's ObjectRef had no as_future (AttributeError)."""
    import asyncio

    async def driver():
        fut = _square.remote(6).as_future()
        assert isinstance(fut, asyncio.Future)
        done = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: done.set_result(f.result() + 1))
        failing = _key_error.remote().as_future()
        with pytest.raises(KeyError):
            await failing
        return await fut, await done

    assert asyncio.run(asyncio.wait_for(driver(), TIMEOUT)) == (36, 37)
    with pytest.raises(RuntimeError, match=r"as_future\(\) needs a running asyncio event loop"):
        _square.remote(1).as_future()


@muster.remote
def _three_items():
    yield from range(3)


def test_wait_takes_generators_as_ray_does():
    gen, ref = _three_items.remote(), _square.remote(2)
    ready, rest = muster.wait([gen, ref], num_returns=2, timeout=TIMEOUT)
    assert ready == [gen, ref] and rest == []  # a generator is ready once its task finished
    assert [muster.get(r, timeout=TIMEOUT) for r in gen] == [0, 1, 2]
    with pytest.raises(TypeError, match="got int"):
        muster.wait([1])


def test_put_of_a_ref_and_wait_on_a_repeated_ref_are_refused_as_ray_does():
    ref = muster.put(1)
    with pytest.raises(TypeError, match=r"put\(\[ref\]\)"):
        muster.put(ref)
    assert muster.get(muster.get(muster.put([ref]))[0]) == 1  # wrapped in a list, as Ray asks
    with pytest.raises(ValueError, match="more than once"):
        muster.wait([ref, ref])


@muster.remote
def get_by_hex(hex_id):
    return muster.get(muster.ObjectRef(bytes.fromhex(hex_id)))


def test_a_ref_rebuilt_from_its_binary_id_is_the_same_ref_in_the_driver_and_in_a_task():
    """Ray's ObjectRef(bytes.fromhex(ref.hex())), ref.binary() and ObjectRef.from_binary."""
    ref = muster.put(41)
    again = muster.ObjectRef(bytes.fromhex(ref.hex()))
    assert again == ref and len(ref.binary()) == 28 and ref.binary().hex() == ref.hex()
    assert muster.ObjectRef.from_binary(ref.binary()) == ref
    assert muster.get(again, timeout=TIMEOUT) == 41
    assert muster.get(get_by_hex.remote(ref.hex()), timeout=TIMEOUT) == 41

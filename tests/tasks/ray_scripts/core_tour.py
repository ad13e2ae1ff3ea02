"""A Ray Core tour written the way Ray's docs write it; only the import line differs."""

import asyncio
import time

import muster as ray
from muster.exceptions import GetTimeoutError, RayTaskError, TaskCancelledError
from muster.util import ActorPool
from muster.util.placement_group import placement_group, remove_placement_group
from muster.util.queue import Queue
from muster.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4, configure_logging=True, logging_level="info", log_to_driver=True, include_dashboard=False,
         ignore_reinit_error=True, namespace="tour")


@ray.remote
def square(x):
    return x * x


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


@ray.remote
class AsyncActor:
    async def run(self, i):
        await asyncio.sleep(0.2)
        return i


@ray.remote
def slow():
    time.sleep(30)


@ray.remote
def fails():
    raise ValueError("expected")


@ray.remote(num_returns=2)
def pair():
    return 1, 2


@ray.remote
def where():
    ctx = ray.get_runtime_context()
    return ctx.get_task_id() is not None, ctx.get_node_id() == ray.get_runtime_context().get_node_id()


assert ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
c = Counter.options(name="counter", lifetime="detached").remote()
ray.get([c.incr.remote() for _ in range(3)])
assert ray.get(ray.get_actor("counter").incr.remote()) == 4

a = AsyncActor.options(max_concurrency=8).remote()
t0 = time.monotonic()
assert ray.get([a.run.remote(i) for i in range(8)]) == list(range(8))
print(f"8 async calls of 0.2 s took {time.monotonic() - t0:.2f} s")

pool = ActorPool([Counter.remote(), Counter.remote()])
assert len(list(pool.map_unordered(lambda actor, _: actor.incr.remote(), range(4)))) == 4

q = Queue()
q.put("hello")
assert q.get() == "hello"

ref = slow.remote()
ray.cancel(ref, force=True)
try:
    ray.get(ref)
except TaskCancelledError:
    pass
try:
    ray.get(fails.remote())
except RayTaskError as err:
    assert isinstance(err, ValueError)
try:
    ray.get(slow.remote(), timeout=0.1)
except GetTimeoutError:
    pass

x, y = pair.remote()
assert ray.get([x, y]) == [1, 2]
assert ray.get(where.remote()) == (True, True)

pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
ray.get(pg.ready())
assert ray.get(square.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote(3)) == 9
remove_placement_group(pg)

# Ray's "global variables" anti-pattern page: an actor's class is exported at .remote(), so it reads
# the global as it was then, however soon the driver changes it (muster pickled it later, in the
# background, and the answer depended on timing)
seen_at_remote = 3


@ray.remote
class ReadsAGlobal:
    def f(self):
        return seen_at_remote + 3


reader = ReadsAGlobal.remote()
seen_at_remote = 4
assert ray.get(reader.f.remote()) == 6

print(ray.util.get_node_ip_address(), ray.util.list_named_actors())
print("resources", ray.cluster_resources())
ray.shutdown()
print("OK")

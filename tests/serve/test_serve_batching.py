"""``@serve.batch`` as Ray 2.60's: callers that left are not run, an item no batch can hold fails its caller,
batched generators stream over HTTP, the settings' forms Ray accepts; the streaming handle calls they take."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest
from serve_helpers import wait_until
from starlette.requests import Request
from starlette.responses import StreamingResponse

from muster import serve
from muster.serve.exceptions import RayServeException, RequestCancelledError

pytestmark = pytest.mark.allow_leftover_workers

SMALL = {"num_cpus": 0.1}


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16)
class Gated:
    """One batch at a time per method, each held until ``open``: calls queued behind can leave before theirs runs."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.batches: list[list] = []
        self.arrived: list[int] = []
        self.left: list[int] = []

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.3)
    async def run(self, xs: list[int]) -> list[int]:
        self.batches.append(list(xs))
        await self.gate.wait()
        return [x * 10 for x in xs]

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.3)
    async def steps(self, xs: list[int]):
        self.batches.append([f"s{x}" for x in xs])
        await self.gate.wait()
        for step in range(2):
            yield [f"{x}-{step}" for x in xs]

    async def __call__(self, x: int) -> int:
        self.arrived.append(x)
        try:
            return await self.run(x)
        except asyncio.CancelledError:
            self.left.append(x)
            raise

    async def stream(self, x: int):
        self.arrived.append(x)
        try:
            async for item in self.steps(x):
                yield item
        except (asyncio.CancelledError, GeneratorExit):
            self.left.append(x)
            raise

    async def open(self) -> None:
        self.gate.set()

    async def seen(self) -> tuple[list[list], list[int], list[int]]:
        return self.batches, self.arrived, self.left


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16)
class Counted:
    """Ray's streaming sample: each caller asks for ``n`` numbers; ``StopIteration`` ends the shorter ones."""

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.3, batch_size_fn=lambda ns: sum(ns))
    async def numbers(self, ns: list[int]):
        for i in range(max(ns)):
            yield [str(i) if i < n else StopIteration for n in ns]

    async def __call__(self, request: Request) -> StreamingResponse:
        return StreamingResponse(self.numbers(int(request.query_params["n"])), media_type="text/plain")

    # the tests fill these batches: a long wait costs nothing then, and a loaded box's calls that arrive more
    # than 0.3 s apart still batch (a short wait ran them in two batches and the tests' sizes failed)
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=10)
    async def sizes(self, xs: list[int]):
        yield [len(xs)] * len(xs)

    @serve.batch(max_batch_size=3, batch_wait_timeout_s=10)
    async def joined(self, xs: list[int], ys: list[str], zs: list[int] | None = None) -> list[str]:
        return [f"{x}{y}{z}/{len(xs)}" for x, y, z in zip(xs, ys, zs or [])]

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0, max_concurrent_batches=2)
    async def overlapping(self, xs: list[int]) -> list[int]:
        self.running = getattr(self, "running", 0) + 1
        self.peak = max(getattr(self, "peak", 0), self.running)
        await asyncio.sleep(0.3)
        self.running -= 1
        return [self.peak] * len(xs)


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16)
class RequestBatches:
    """Ray's batching guide: ``__call__`` itself batched, taking the HTTP requests as a list."""

    @serve.batch(max_batch_size=3, batch_wait_timeout_s=1.0)  # full at 3: no wait then
    async def __call__(self, requests: list[Request]):
        ns = [int(r.query_params["n"]) for r in requests]
        for i in range(max(ns)):
            yield [f"{i}/{len(ns)}," if i < n else StopIteration for n in ns]


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=1)
class OneAtATime:
    async def ticks(self):
        for _ in range(3000):  # 30 s at most
            yield "tick"
            await asyncio.sleep(0.01)

    def ping(self) -> str:
        return "pong"


def test_callers_that_left_before_their_batch_ran_are_left_out_of_it(client):
    """As Ray's: a call cancelled while its batch waited (for ``max_concurrent_batches``) is dropped from it, a
    stream closed then too (both ran in the batch for no one)."""
    h = serve.run(Gated.bind(), name="gated", route_prefix=None)
    streams = h.options(stream=True)

    def seen(i: int) -> list:
        return sorted(map(str, h.seen.remote().result(timeout_s=10)[i]))

    try:
        first, first_stream = h.remote(0), streams.stream.remote(10)
        wait_until(lambda: seen(0) == ["['s10']", "[0]"], 20, "each method's first batch to start")
        gone, kept, stream_gone = h.remote(1), h.remote(2), streams.stream.remote(3)
        wait_until(lambda: seen(1) == ["0", "1", "10", "2", "3"], 20, "the calls to queue in the replica")
        gone.cancel()
        stream_gone.cancel()
        wait_until(lambda: seen(2) == ["1", "3"], 20, "the cancels to reach the replica")
        stream_kept = streams.stream.remote(4)
        wait_until(lambda: "4" in seen(1), 20, "the last stream to queue")
        h.open.remote().result(timeout_s=10)
        assert first.result(timeout_s=20) == 0 and kept.result(timeout_s=20) == 20
        assert list(first_stream) == ["10-0", "10-1"] and list(stream_kept) == ["4-0", "4-1"]
        assert seen(0) == ["['s10']", "['s4']", "[0]", "[2]"]  # before: [1, 2] and ['s3'] (or ['s3', 's4']) too
    finally:
        serve.delete("gated")


def test_an_item_bigger_than_a_batch_fails_its_caller_and_generators_stream_over_http(client):
    """With ``batch_size_fn``, one item counted over ``max_batch_size`` raises ``RuntimeError`` to its caller, as
    Ray's (it ran alone in a batch too big); each HTTP caller streams its own items of a batched generator."""
    serve.run(Counted.bind(), name="counted", route_prefix="/counted")
    try:
        h = serve.get_app_handle("counted").options(stream=True)
        with pytest.raises(RuntimeError, match=r"counts this call's item as 5, more than max_batch_size=4"):
            list(h.numbers.remote(5))
        assert list(h.numbers.remote(3)) == ["0", "1", "2"]  # the batcher goes on
        with client.stream("GET", "/counted", params={"n": 2}) as short, \
                client.stream("GET", "/counted", params={"n": 1}) as shorter:
            assert "".join(short.iter_text()) == "01" and "".join(shorter.iter_text()) == "0"
        assert client.get("/counted", params={"n": 4}).text == "0123"
        serve.run(RequestBatches.bind(), name="requests", route_prefix="/requests")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            texts = list(pool.map(lambda n: client.get("/requests", params={"n": n}).text, [1, 2, 3]))
        assert [t.replace("/3", "") for t in texts] == ["0,", "0,1,", "0,1,2,"] and "/3" in texts[2]  # one batch
    finally:
        serve.delete("counted")
        serve.delete("requests")


def test_streaming_calls_are_sent_when_made_so_they_batch_together(client):
    """As Ray's handle: ``remote()`` sends a streaming call at once (muster sent it on the first ``next``, so
    streams made together and read one after another each ran in a batch of one); a stream dropped unread is
    closed, freeing its replica's slot."""
    serve.run(Counted.bind(), name="counted", route_prefix=None)
    serve.run(OneAtATime.bind(), name="one", route_prefix=None)
    try:
        h = serve.get_app_handle("counted").options(stream=True)
        streams = [h.sizes.remote(i) for i in range(4)]
        assert [list(s) for s in streams] == [[4]] * 4  # before: [[1], [1], [1], [1]]
        calls = [serve.get_app_handle("counted").overlapping.remote(i) for i in range(4)]
        assert max(c.result(timeout_s=10) for c in calls) == 2  # max_concurrent_batches=2 batches at once
        one = serve.get_app_handle("one")
        one.options(stream=True).ticks.remote()  # dropped at once: its 30 s stream would hold the only slot
        assert one.ping.remote().result(timeout_s=10) == "pong"
        assert next(iter(one.options(stream=True).ticks.remote())) == "tick"
        assert one.ping.remote().result(timeout_s=10) == "pong"  # the half-read stream was closed when dropped
    finally:
        serve.delete("counted")
        serve.delete("one")


def test_calls_passing_an_argument_by_position_or_by_name_batch_together_as_rays(client):
    """Ray places each call's arguments by the method's signature: ``f(1, "a", 7)``, ``f(2, ys="b", zs=8)`` and
    ``f(xs=3, ys="c", zs=9)`` run as one batch; muster refused the batch ("passed different arguments")."""
    h = serve.run(Counted.bind(), name="counted", route_prefix=None)
    try:
        calls = [h.joined.remote(1, "a", 7), h.joined.remote(2, ys="b", zs=8), h.joined.remote(xs=3, ys="c", zs=9)]
        assert [c.result(timeout_s=10) for c in calls] == ["1a7/3", "2b8/3", "3c9/3"]
        with pytest.raises(TypeError, match=r"joined: a call with 1 positional argument\(s\) and keywords \['xs'\]"):
            h.joined.remote(1, xs=2).result(timeout_s=10)  # one value twice: refused naming the call
    finally:
        serve.delete("counted")


def test_a_cancelled_stream_raises_request_cancelled_and_a_stream_has_no_result_as_rays(client):
    """Ray's DeploymentResponseGenerator: iterating it after ``cancel()`` raises ``RequestCancelledError`` (here
    it ended as if the stream were done), ``cancelled()`` says so (also a response's), ``result()`` and ``await``
    are refused naming ``for``/``async for`` (an AttributeError)."""
    one = serve.run(OneAtATime.bind(), name="one", route_prefix=None)
    try:
        gen = one.options(stream=True).ticks.remote()
        assert next(gen) == "tick" and not gen.cancelled()
        gen.cancel()
        assert gen.cancelled()
        with pytest.raises(RequestCancelledError):
            next(gen)

        async def cancelled_async() -> None:
            agen = one.options(stream=True).ticks.remote()
            assert await agen.__anext__() == "tick"
            agen.cancel()
            with pytest.raises(RequestCancelledError):
                await agen.__anext__()
            with pytest.raises(TypeError, match="async for item in response"):
                await agen

        asyncio.run(cancelled_async())
        with pytest.raises(TypeError, match=r"has no .result\(\); iterate it with `for item in response`"):
            one.options(stream=True).ticks.remote().result()
        response = one.ping.remote()
        assert not response.cancelled()
        response.cancel()
        assert response.cancelled()
        assert one.ping.remote().result(timeout_s=10) == "pong"  # the cancelled streams gave their slot back
    finally:
        serve.delete("one")


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=8)
class Miscounts:
    @serve.batch(max_batch_size=3, batch_wait_timeout_s=0.3)
    async def __call__(self, xs: list[int]) -> list[int]:
        return [*xs, 0]  # one result too many, however the calls were batched

    @serve.batch(max_batch_size=3, batch_wait_timeout_s=0.1)
    async def scalar(self, xs: list[int]) -> int:
        return 7


def test_a_batch_returning_the_wrong_number_of_results_fails_its_callers_as_rays(client):
    """Ray 2.60 (measured): each caller gets a RayServeException ("doesn't preserve batch size"); it was a
    TypeError. A result that is no sequence stays a TypeError, as Ray's len() of it raises."""
    h = serve.run(Miscounts.bind(), name="miscounts", route_prefix=None)
    calls = [h.remote(i) for i in range(3)]
    for call in calls:
        with pytest.raises(RayServeException, match=r"inputs and returned list of length \d; return a sequence"):
            call.result(timeout_s=30)
    with pytest.raises(TypeError, match=r"got 1 inputs and returned int"):
        h.scalar.remote(9).result(timeout_s=30)
    serve.delete("miscounts")


def test_an_integral_float_batch_size_is_taken_as_rays():
    """Ray takes ``max_batch_size=4.0`` (a config's number) as 4; muster refused it."""

    @serve.batch(max_batch_size=4.0)
    async def f(xs: list[int]) -> list[int]:
        return xs

    assert f._get_max_batch_size() == 4 and isinstance(f._get_max_batch_size(), int)
    f.set_max_batch_size(2.0)
    assert f._get_max_batch_size() == 2
    with pytest.raises(ValueError, match=r"max_batch_size=2.5: use an integer >= 1"):
        serve.batch(max_batch_size=2.5)
    with pytest.raises(ValueError, match=r"max_concurrent_batches=2.0"):  # Ray refuses a float here
        serve.batch(max_concurrent_batches=2.0)


def test_a_bare_batch_on_an_async_generator_is_refused_naming_the_called_form_as_rays():
    """Ray 2.60's bare ``@serve.batch`` refuses an async generator (a TypeError); muster batched it."""
    from muster.exceptions import InvalidTypeError

    with pytest.raises(InvalidTypeError, match=r"bare @serve.batch on the async generator .*gen.*@serve.batch\(\)"):
        @serve.batch
        async def gen(xs: list[int]):
            yield xs

    @serve.batch()
    async def called(xs: list[int]):
        yield [x + 1 for x in xs]

    async def one() -> list:
        return [item async for item in called(1)]

    assert asyncio.run(one()) == [2]


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16)
class Measured:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=1.0)
    async def __call__(self, xs: list[int]) -> list[int]:
        end = time.monotonic() + 0.05  # at least 50 ms by the clock: a uvloop timer of 50 ms can fire after 49.6
        while time.monotonic() < end:
            await asyncio.sleep(end - time.monotonic())
        return [x * 2 for x in xs]


def test_batch_metrics_are_rays_and_reach_serve_status(client):
    """Ray 2.60's batch metrics (``serve_batches_processed``, ``serve_actual_batch_size``, ...) were missing."""
    handle = serve.run(Measured.bind(), name="measured", route_prefix=None)
    try:
        responses = [handle.remote(i) for i in range(8)]
        assert sorted(r.result(timeout_s=30) for r in responses) == [0, 2, 4, 6, 8, 10, 12, 14]

        def series() -> dict[str, list[dict]]:
            got = serve.status().applications["measured"].deployments["Measured"].metrics.get("custom_metrics")
            out: dict[str, list[dict]] = {}
            for s in got or []:
                out.setdefault(s["name"], []).append(s)
            return out

        def total(s: dict, name: str, key: str = "value") -> float:
            return sum(x[key] for x in s.get(name, []))

        def complete() -> dict | None:  # the last batch's execution time is recorded after its callers have theirs
            s = series()
            done = total(s, "serve_actual_batch_size", "sum") == 8
            return s if done and total(s, "serve_batch_execution_time_ms", "count") == total(
                s, "serve_batches_processed") else None

        s = wait_until(complete, 30, "the batch metrics of 8 calls")
        batches = total(s, "serve_batches_processed")
        assert 2 <= batches <= 8 and total(s, "serve_actual_batch_size", "count") == batches
        assert total(s, "serve_batch_utilization_percent", "sum") == 8 / 4 * 100
        assert total(s, "serve_batch_wait_time_ms", "count") == batches
        assert total(s, "serve_batch_execution_time_ms", "sum") >= 50 * batches
        assert "serve_batch_queue_length" in s
        for name in ("serve_batches_processed", "serve_actual_batch_size", "serve_batch_queue_length"):
            (one,) = s[name]
            assert one["tags"]["function_name"] == "__call__" and one["tags"]["deployment"] == "Measured"
            assert one["tags"]["application"] == "measured"
    finally:
        serve.delete("measured")

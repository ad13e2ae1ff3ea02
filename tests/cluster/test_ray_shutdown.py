"""``muster.shutdown()`` on a Ray cluster while one of muster's threads is inside a Ray call, or still holds
one of Ray's refs.

Ray ends the whole process (exit status 1, nothing on stderr) when a thread touches its core worker
after ``ray.shutdown()``, and a Ray call on a driver thread after it connects to Ray anew instead.
The suite's run died so once, with no test failing. The driver here runs as its own process, so such
an end is this test's failure, not the session's.
"""

from __future__ import annotations

import os
import subprocess
import sys

_DRIVER = """
import sys, threading, time
import ray
import muster
from muster.core import api
from muster.exceptions import RuntimeNotStartedError

rt = muster.init(address=sys.argv[1])
nodes = [n for n in ray.nodes() if n["Alive"]]
hold = ray.util.placement_group([{"CPU": 2}] * len(nodes), strategy="STRICT_SPREAD")  # every CPU
ray.get(hold.ready(), timeout=60)

class Member:
    pass

out = {}
def gang():  # waits in the engine for CPUs that never free: a Ray call every half second
    try:
        rt.create_gang(1, Member, {"CPU": 2}, timeout_s=60)
    except BaseException as exc:
        out["error"] = exc
waiter = threading.Thread(target=gang)
waiter.start()
time.sleep(1.5)
muster.shutdown()
waiter.join(30)
assert not waiter.is_alive(), "the gang still waits after the shutdown"
assert isinstance(out.get("error"), RuntimeNotStartedError), repr(out.get("error"))
assert "muster.init()" in str(out["error"])
time.sleep(1.0)  # a late Ray call would have connected anew by now
assert not ray.is_initialized(), "a Ray call after muster.shutdown() connected to Ray anew"
print("SHUTDOWN OK", flush=True)
"""


def _run_driver(source: str, address: str, tmp_path, says: str) -> None:
    script = tmp_path / "driver.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, str(script), address], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and says in proc.stdout, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def test_shutdown_waits_for_a_ray_call_in_flight_and_later_calls_are_refused(ray_cluster, tmp_path):
    _run_driver(_DRIVER, ray_cluster.address, tmp_path, "SHUTDOWN OK")


_DRIVER_CALLBACK = """
import sys, threading, time
import muster

muster.init(address=sys.argv[1])

@muster.remote
def one():
    return 1

ref = one.remote()
ended = threading.Event()
def slow(_):  # runs on the engine's thread that settled the task; that thread holds Ray's ref of the task
    time.sleep(1.0)
    ended.set()
ref.future().add_done_callback(slow)
assert muster.get(ref, timeout=60) == 1
muster.shutdown()
assert ended.is_set(), "muster.shutdown() ended Ray while the engine's thread still held the task's Ray ref"
print("LET GO OK", flush=True)
"""


def test_shutdown_waits_for_the_engines_threads_to_let_go_of_rays_refs(ray_cluster, tmp_path):
    """Ray ends the process (exit 1, its message only in its log) when the last reference to a Ray ObjectRef
    goes in another thread while ``ray.shutdown()`` takes its core worker down. A task's last reference goes as
    the engine's thread that settled it ends, after the user's ``muster.get`` has returned: the suite's run died
    so at the end of a module whose last test got a task's error. ``muster.shutdown()`` now waits for those
    threads before it ends Ray; a done-callback that keeps one busy for a second shows whether it did."""
    _run_driver(_DRIVER_CALLBACK, ray_cluster.address, tmp_path, "LET GO OK")


_DRIVER_DROPS_REFS = """
import sys, threading, time
import ray
import muster

muster.init(address=sys.argv[1])
refs = [ray.put(i) for i in range(3000)]  # the user's own Ray refs, beside muster

def drop():  # lets go of them one by one, as any thread may while the driver shuts down
    while refs:
        refs.pop()
        time.sleep(0.0001)

dropper = threading.Thread(target=drop)
dropper.start()
time.sleep(0.02)
muster.shutdown()
dropper.join(60)
print("DROPS OK", len(refs), flush=True)
"""


def test_refs_dropped_by_another_thread_while_muster_shuts_ray_down_do_not_end_the_process(ray_cluster, tmp_path):
    """Ray ends the process (exit 1, its message only in its log) when a thread lets go of an ObjectRef while
    ``ray.shutdown()`` takes the core worker down, whichever thread and whoever's ref (the suite's run died so
    after test 169, on a thread that a Data module had started). ``muster.shutdown()`` hides Ray's core worker
    from every other thread while it ends Ray, so such a drop is skipped, as one after the shutdown is."""
    _run_driver(_DRIVER_DROPS_REFS, ray_cluster.address, tmp_path, "DROPS OK")

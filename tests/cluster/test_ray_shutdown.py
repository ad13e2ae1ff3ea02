"""``muster.shutdown()`` on a Ray cluster while one of muster's threads is inside a Ray call.

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


def test_shutdown_waits_for_a_ray_call_in_flight_and_later_calls_are_refused(ray_cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, str(script), ray_cluster.address], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "SHUTDOWN OK" in proc.stdout, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")

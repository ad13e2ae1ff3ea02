"""Starting and stopping Serve as Ray's API does: the port, HTTPS, several apps at once, async shutdown."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess

import httpx
import pytest
from serve_helpers import serving

import muster
from muster import serve

pytestmark = pytest.mark.allow_leftover_workers


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
def hello() -> str:
    return "hello"


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Named:
    def __init__(self, name: str):
        self.name = name

    def __call__(self) -> str:
        return self.name


def test_a_port_another_process_listens_on_is_refused_naming_it():
    """Both servers bind with SO_REUSEPORT: a second driver's Serve on port 8000 shared the port with the
    first, and requests went to one or the other in turn."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as a second Serve's server would find it
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(serve.RayServeException, match=f"cannot listen on 127.0.0.1:{port}: another process"):
            serve.start(http_options={"host": "127.0.0.1", "port": port})
    with serving():  # nothing was left half started
        assert serve.run(hello.bind(), name="hello", route_prefix="/hello").remote().result(timeout_s=30) == "hello"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("location", ["Disabled", "NoServer"])
def test_proxy_location_disabled_runs_no_http_server_and_handles_work(location):
    """Ray runs no proxy then; muster warned and ran its HTTP ingress anyway."""
    import warnings

    from muster.serve.config import ProxyLocation

    port = _free_port()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # it is done, not warned about
        serve.start(proxy_location=location, http_options={"host": "127.0.0.1", "port": port})
    try:
        h = serve.run(Named.bind("no proxy"), name="noproxy", route_prefix="/np")
        assert h.remote().result(timeout_s=30) == "no proxy"
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: nothing listens on it
        st = serve.status()
        assert st.proxies == {} and st.http == {} and st.applications["noproxy"].status == "RUNNING"
        # `muster serve status|shutdown --port` find it by no port: its record (filed under its pid) has none,
        # so it never takes the place of an instance that serves that port in another process
        from muster.serve import cli_commands
        from muster.serve._internal import admin

        assert cli_commands._instance(port, quiet=True) is None
        mine = [r for r in admin.instances() if r["pid"] == os.getpid()]
        assert [r["port"] for r in mine] == [None] and not os.path.exists(admin.state_file(port))
        with pytest.warns(UserWarning, match=r"Serve already runs without an HTTP ingress; proxy_location="
                                             r"'HeadOnly' applies to a new start"):
            serve.start(proxy_location=ProxyLocation.HeadOnly)
    finally:
        serve.shutdown()
    with serving() as client:  # started by default: with its ingress again
        serve.run(Named.bind("proxied"), name="proxied", route_prefix="/p")
        assert client.get("/p").text == "proxied" and list(serve.status().proxies) == ["ingress"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command makes the test's certificate")
@pytest.mark.parametrize("server", ["granian", "uvicorn"])
def test_https_with_a_certificate_and_key(tmp_path, server):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with serving(server=server, ssl_keyfile=str(key), ssl_certfile=str(cert)):
        serve.run(hello.bind(), name="hello", route_prefix="/hello")
        port = serve.status().http["port"]
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(f"https://127.0.0.1:{port}/hello", verify=trusted, timeout=10).text == "hello"
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the HTTPS port is not served
            httpx.get(f"http://127.0.0.1:{port}/hello", timeout=5)


def test_https_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="HTTPS needs both"):
        serve.start(http_options={"port": 0, "ssl_certfile": str(tmp_path)})
    with pytest.raises(ValueError, match=r"ssl_keyfile='/nonexistent/key.pem': no such file"):
        serve.start(http_options={"port": 0, "ssl_keyfile": "/nonexistent/key.pem", "ssl_certfile": "/nonexistent/c"})


def test_run_many_deploys_each_app_and_shutdown_async_stops_them():
    with serving() as client:
        first, second = serve.run_many([serve.RunTarget(Named.bind("a"), name="a", route_prefix="/a"),
                                        serve.RunTarget(Named.bind("b"), name="b", route_prefix=None)])
        assert (first.remote().result(timeout_s=30), second.remote().result(timeout_s=30)) == ("a", "b")
        assert client.get("/a").text == "a"
        assert set(serve.status().applications) == {"a", "b"}
        with pytest.raises(ValueError, match=r"the app name\(s\) \['x'\] are given more than once"):
            serve.run_many([serve.RunTarget(hello.bind(), name="x"), serve.RunTarget(hello.bind(), name="x")])
        with pytest.raises(ValueError, match="is not a RunTarget"):
            serve.run_many([hello.bind()])
        asyncio.run(serve.shutdown_async())
        assert serve.status().applications == {}
        # as Ray's (RayServeException "There is no Serve instance running on this Ray cluster."); it did nothing
        with pytest.raises(serve.RayServeException, match=r"There is no Serve instance running: serve.delete\('a'\)"):
            serve.delete("a")


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
def _running_apps() -> list[str]:
    return sorted(n for n, a in serve.status().applications.items() if a.status == "RUNNING")


@muster.remote
def _apps_a_task_sees() -> list[str]:
    return sorted(serve.status().applications)


def test_serve_status_in_a_replica_or_a_task_is_the_drivers():
    """Ray's monitoring snippet serves serve.status() from a deployment; it said no app ran there (an empty
    status: only the driver has the controller), so the snippet's app listed nothing."""
    with serving() as client:
        serve.run(_running_apps.bind(), name="monitor", route_prefix="/monitor")
        serve.run(hello.bind(), name="hello", route_prefix="/hello")
        assert client.get("/monitor").json() == ["hello", "monitor"]
        assert muster.get(_apps_a_task_sees.remote(), timeout=30) == ["hello", "monitor"]


BLOCKING_DRIVER = '''
import sys
import threading
import time

from muster import serve

@serve.deployment(ray_actor_options={"num_cpus": 0.1})
def hi() -> str:
    return "hi"

def say_when_blocking():  # once serve.run has deployed and sleeps until Ctrl-C (a Ctrl-C mid-deploy raises too)
    main = threading.main_thread().ident
    while sys._current_frames()[main].f_code.co_name != "_serve_until_interrupted":
        time.sleep(0.05)
    print("BLOCKING", flush=True)

serve.start(http_options={"host": "127.0.0.1", "port": 0})
print("PORT", serve.status().http["port"], flush=True)
print("DIR", serve.api._controller.dir, flush=True)
threading.Thread(target=say_when_blocking, daemon=True).start()
try:
    serve.run(hi.bind(), True, "blocked", "/")  # Ray's positional order: target, blocking, name, route_prefix
    print("AFTER serve.run", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", list(serve.status().applications), flush=True)
    print("STILL", serve.get_app_handle("blocked").remote().result(timeout_s=30), flush=True)
'''


def test_blocking_run_stopped_by_ctrl_c_raises_keyboard_interrupt_and_leaves_serve_to_the_driver(tmp_path):
    """Ray's serve.run(app, blocking=True) re-raises the Ctrl-C: the driver's code after it does not run (muster
    returned, so the code after it ran as if serving had finished). As Ray's, it leaves Serve running: a driver
    that catches the interrupt still reaches its apps (muster shut Serve down first), and Serve ends with it."""
    import os
    import re
    import signal
    import sys

    (tmp_path / "driver.py").write_text(BLOCKING_DRIVER)
    env = dict(os.environ, MUSTER_PRELOAD="", MUSTER_RUN_STORE="0", MUSTER_SERVE_DIR=str(tmp_path / "state"),
               PYTHONPATH=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src")))
    proc = subprocess.Popen([sys.executable, "driver.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        port = int(re.match(r"PORT (\d+)", proc.stdout.readline()).group(1))
        sockets = proc.stdout.readline().split()[1]
        assert os.path.isdir(sockets) and os.listdir(tmp_path / "state")
        assert proc.stdout.readline() == "BLOCKING\n"
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).text == "hi"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "AFTER serve.run" not in out, out
    assert "KeyboardInterrupt ['blocked']\nSTILL hi\n" in out, out  # before: "KeyboardInterrupt {}" (shut down)
    assert "Serve keeps running until this process exits" in out, out
    assert proc.returncode == 0, out
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    assert not os.path.exists(sockets) and not os.listdir(tmp_path / "state")  # before: both were left

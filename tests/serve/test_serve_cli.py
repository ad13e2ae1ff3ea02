"""``muster serve run|deploy|config|status|shutdown`` as a user runs them: real subprocesses, a free port."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml
from _shared import wait_for

APP = '''
import os

from pydantic import BaseModel

from muster import serve

@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Hello:
    def __init__(self, who: str = "world"):
        self.who = who

    def __call__(self, request):
        greeting = os.environ.get("GREETING")
        return {"hello": self.who, **({"greeting": greeting} if greeting else {})}

app = Hello.bind()

def build(args):
    return Hello.bind(args["who"])

class Args(BaseModel):
    who: str
    times: int = 1

def build_typed(args: Args):  # Ray's typed app builder: args arrive as the model
    return Hello.bind(args.who * args.times)
'''

CONFIG = '''
applications:
  - name: second
    route_prefix: /second
    import_path: cli_app:build
    args: {who: config}
    runtime_env: {env_vars: {GREETING: hi}}
    deployments:
      - name: Hello
        num_replicas: 2
'''


@pytest.fixture
def env(tmp_path):
    (tmp_path / "cli_app.py").write_text(APP)
    (tmp_path / "serve.yaml").write_text(CONFIG)
    e = dict(os.environ)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    e.update(PYTHONPATH=os.pathsep.join([os.path.abspath(src), str(tmp_path)]),
             MUSTER_SERVE_DIR=str(tmp_path / "state"),
             MUSTER_PRELOAD="", MUSTER_RUN_STORE="0")
    return e


def _muster(env, cwd, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "muster.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _start(env, cwd, *args):
    proc = subprocess.Popen([sys.executable, "-m", "muster.cli", "serve", "run", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 120
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = re.search(r"at http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1)), lines
    proc.kill()
    pytest.fail(f"`muster serve run` did not come up:\n{''.join(seen)}")


def _wait_exit(proc, timeout=60) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the serve process did not exit")


@contextlib.contextmanager
def _stopped_by_ctrl_c(proc, lines):
    """Run the block, then Ctrl-C ``proc`` (it must exit 0); yields the list its output is put in, after."""
    out: list[str] = []
    try:
        yield out
        proc.send_signal(signal.SIGINT)
        assert _wait_exit(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    while not lines.empty():
        out.append(lines.get())


def test_run_status_deploy_shutdown(env, tmp_path, monkeypatch):
    # Ray's `serve run module:builder key=value`, into a typed builder; as in Ray's CLI, a pair may follow an option
    proc, port, _ = _start(env, tmp_path, "cli_app:build_typed", "who=ab", "--port", "0", "times=2")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "abab"}
        st = _muster(env, tmp_path, "serve", "status")
        assert st.returncode == 0, st.stderr
        status = yaml.safe_load(st.stdout)  # YAML, as Ray's `serve status` prints (it was JSON)
        assert st.stdout.startswith("proxies:")
        assert status["applications"]["default"]["status"] == "RUNNING"
        assert status["http"]["port"] == port
        # Ray's `serve config`: only apps deployed from a config file have one
        assert _muster(env, tmp_path, "serve", "config").stdout == "No configuration was found.\n"
        dep = _muster(env, tmp_path, "serve", "deploy", "serve.yaml", "--port", str(port))
        assert dep.returncode == 0, dep.stderr + dep.stdout
        cf = _muster(env, tmp_path, "serve", "config", "--port", str(port))
        assert cf.returncode == 0, cf.stderr
        assert yaml.safe_load(cf.stdout) == yaml.safe_load(CONFIG)["applications"][0]  # the entry as the file has it
        second = yaml.safe_load(_muster(env, tmp_path, "serve", "config", "-n", "second").stdout)
        assert second["args"] == {"who": "config"}
        # the app's runtime_env env_vars reach its replicas
        assert httpx.get(f"http://127.0.0.1:{port}/second", timeout=30).json() == {"hello": "config", "greeting": "hi"}
        status = json.loads(_muster(env, tmp_path, "serve", "status", "--json", "-n", "second").stdout)
        assert status["applications"]["second"]["deployments"]["Hello"]["replica_states"] == {"RUNNING": 2}
        # as Ray's serve deploy: the running apps are the config's, so the one it does not list is gone
        assert set(yaml.safe_load(_muster(env, tmp_path, "serve", "status").stdout)["applications"]) == {"second"}
        # a handle from another process: not supported, and the error says where the app is and what to do
        from muster import serve

        monkeypatch.setenv("MUSTER_SERVE_DIR", env["MUSTER_SERVE_DIR"])
        with pytest.raises(serve.RayServeException,
                           match=rf"another process \(pid {proc.pid}.*127.0.0.1:{port}/second"):
            serve.get_app_handle("second")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code == 404
        down = _muster(env, tmp_path, "serve", "shutdown", "-y", "--port", str(port))  # Ray's scripts pass -y
        assert down.returncode == 0, down.stderr
        assert _wait_exit(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    gone = _muster(env, tmp_path, "serve", "status")
    assert gone.returncode == 1 and "no running Serve instance" in gone.stderr


def test_ctrl_c_drains_and_stops(env, tmp_path):
    proc, port, lines = _start(env, tmp_path, "serve.yaml", "--port", "0")
    with _stopped_by_ctrl_c(proc, lines) as out:
        assert httpx.get(f"http://127.0.0.1:{port}/second", timeout=30).json() == {"hello": "config", "greeting": "hi"}
    assert "Draining and stopping" in "".join(out)


def test_sigkill_of_serve_run_leaves_no_process(env, tmp_path):
    """The ingress (a fresh interpreter, not a fork of the zygote) and the replicas go with a killed driver."""
    import psutil

    proc, port, _ = _start(env, tmp_path, "cli_app:app", "--port", "0")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "world"}
        tree = psutil.Process(proc.pid).children(recursive=True)
        fresh = [p for p in tree if "--worker" in p.cmdline()]
        assert len(fresh) == 1, [p.cmdline() for p in tree]  # the ingress
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, f"still alive 10 s after `serve run` was killed: {[p.cmdline() for p in alive]}"


def test_non_blocking_run_returns_and_serves_until_shutdown(env, tmp_path):
    """Ray's tutorials run `serve run module:app --non-blocking`, send requests, then `serve shutdown -y`."""
    import psutil

    r = _muster(env, tmp_path, "serve", "run", "cli_app:app", "--port", "0", "--non-blocking")
    assert r.returncode == 0, r.stderr + r.stdout
    port = int(re.search(r"at http://127\.0\.0\.1:(\d+)", r.stdout).group(1))
    pid = int(re.search(r"in the background \(pid (\d+)", r.stdout).group(1))
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "world"}
        # a second app joins the running instance, as Ray's tutorials run several (`--name llm`, `--name weather`)
        r = _muster(env, tmp_path, "serve", "run", "cli_app:build", "who=two", "--name", "two", "--route-prefix",
                    "/two", "--port", str(port), "--non-blocking")
        assert r.returncode == 0 and f"running Serve instance, pid {pid}" in r.stdout, r.stderr + r.stdout
        assert httpx.get(f"http://127.0.0.1:{port}/two", timeout=30).json() == {"hello": "two"}
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "world"}
        down = _muster(env, tmp_path, "serve", "shutdown", "-y")
        assert down.returncode == 0, down.stderr
        assert psutil.wait_procs([psutil.Process(pid)], timeout=60)[1] == []
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
    (tmp_path / "broken_app.py").write_text(
        "from muster import serve\n\n@serve.deployment(ray_actor_options={'num_cpus': 0.1})\nclass Broken:\n"
        "    def __init__(self):\n        raise RuntimeError('no weights here')\n\napp = Broken.bind()\n")
    r = _muster(env, tmp_path, "serve", "run", "broken_app:app", "--port", "0", "--non-blocking")
    assert r.returncode == 1 and "no weights here" in r.stderr and "exited with 1 before serving" in r.stderr


def test_run_takes_rays_app_dir_runtime_env_and_address_options(env, tmp_path):
    """Ray's `serve run -d DIR --runtime-env-json '{"env_vars": ...}' -a ADDR module:app` (dev-workflow guide)
    and `--runtime-env FILE` (the batch tutorial's troubleshooting): each was an unrecognized argument."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "sibling.py").write_text("WHO = 'sibling'\n")
    sub_app = APP.replace('"world"', "sibling.WHO").replace("import os", "import os\nimport sibling")
    (sub / "sub_app.py").write_text(sub_app)
    proc, port, _ = _start(env, tmp_path, "-d", "sub", "sub_app:app", "--port", "0", "-a", "auto",
                           "--runtime-env-json", '{"env_vars": {"GREETING": "bonjour"}}')
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "sibling", "greeting": "bonjour"}
    finally:
        proc.send_signal(signal.SIGINT)
        _wait_exit(proc)
    (tmp_path / "env.yaml").write_text("env_vars: {GREETING: hej}\n")
    proc, port, _ = _start(env, tmp_path, "cli_app:app", "--port", "0", "--runtime-env", "env.yaml")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"hello": "world", "greeting": "hej"}
    finally:
        proc.send_signal(signal.SIGINT)
        _wait_exit(proc)
    r = _muster(env, tmp_path, "serve", "run", "cli_app:app", "--working-dir", "s3://bucket/app.zip", timeout=60)
    assert r.returncode == 2 and "takes a local folder only" in r.stderr


def test_reload_redeploys_when_the_module_changes(env, tmp_path):
    """Ray's `serve run --reload`: an edit of the app's module is served without a restart (the replicas import
    the new code: their processes held the old module), and a broken edit keeps the running version."""
    app_dir = tmp_path / "live"
    app_dir.mkdir()
    source = ("from muster import serve\n\n@serve.deployment(ray_actor_options={'num_cpus': 0.1})\nclass V:\n"
              "    def __call__(self, request):\n        return {'version': VERSION}\n\nVERSION = 1\napp = V.bind()\n")
    (app_dir / "live_app.py").write_text(source)
    proc, port, lines = _start(env, tmp_path, "live_app:app", "-d", "live", "--reload", "--port", "0")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"version": 1}
        (app_dir / "live_app.py").write_text(source.replace("VERSION = 1", "VERSION = 2"))
        assert wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"version": 2}, 90)
        (app_dir / "live_app.py").write_text(source.replace("VERSION = 1", "VERSION = (2"))
        deadline, seen = time.monotonic() + 90, ""
        while "the running version stays" not in seen and time.monotonic() < deadline:
            try:
                seen += lines.get(timeout=1)
            except queue.Empty:
                pass
        assert "the running version stays" in seen and "SyntaxError" in seen, seen
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"version": 2}
    finally:
        proc.send_signal(signal.SIGINT)
        _wait_exit(proc)
    r = _muster(env, tmp_path, "serve", "run", "cli_app:app", "--reload", "--non-blocking", timeout=60)
    assert r.returncode == 2 and "drop --non-blocking" in r.stderr


def test_bad_import_path_names_module_and_attribute(env, tmp_path):
    r = _muster(env, tmp_path, "serve", "run", "no_such_module:app", timeout=60)
    assert r.returncode == 2 and "module 'no_such_module' was not found" in r.stderr
    r = _muster(env, tmp_path, "serve", "run", "cli_app:nope", timeout=60)
    assert r.returncode == 2 and "has no attribute 'nope'" in r.stderr and "cli_app" in r.stderr
    (tmp_path / "bad.yaml").write_text("applications:\n  - name: x\n    import_path: cli_app:app\n    colour: red\n")
    r = _muster(env, tmp_path, "serve", "deploy", "bad.yaml", timeout=60)
    assert r.returncode == 2 and "unknown field(s) ['colour']" in r.stderr


BUILT = '''
from muster import serve

@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.1}, user_config={"k": 1})
class Model:
    def reconfigure(self, config):
        self.config = config

    def __call__(self):
        return self.config

@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=7)
class Front:
    def __init__(self, model):
        self.model = model

    async def __call__(self):
        return await self.model.remote()

app = Front.bind(Model.bind())
'''


def test_build_writes_a_config_that_serve_run_serves(env, tmp_path):
    """Ray's `serve build` (it was an unknown command)."""
    (tmp_path / "built_app.py").write_text(BUILT)
    r = _muster(env, tmp_path, "serve", "build", "built_app:app", "cli_app:app", "-o", "built.yaml", timeout=60)
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load((tmp_path / "built.yaml").read_text())
    first, second = config["applications"]
    assert (first["name"], first["route_prefix"], first["import_path"]) == ("app1", "/", "built_app:app")
    assert first["deployments"] == [
        {"name": "Model", "num_replicas": 2, "ray_actor_options": {"num_cpus": 0.1}, "user_config": {"k": 1}},
        {"name": "Front", "ray_actor_options": {"num_cpus": 0.1}, "max_ongoing_requests": 7}]
    assert (second["name"], second["route_prefix"]) == ("app2", "/app2")
    proc, port, _ = _start(env, tmp_path, "built.yaml", "--port", "0")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).json() == {"k": 1}
        assert httpx.get(f"http://127.0.0.1:{port}/app2", timeout=30).json() == {"hello": "world"}
    finally:
        proc.send_signal(signal.SIGINT)
        assert _wait_exit(proc) == 0
    r = _muster(env, tmp_path, "serve", "build", "built_app:nope", timeout=60)
    assert r.returncode == 2 and "has no attribute 'nope'" in r.stderr


def test_serve_run_of_a_websocket_app_starts_its_ingress_on_uvicorn(env, tmp_path):
    """No server named: the ingress starts on uvicorn at once (no granian first, no move), and echoes."""
    from websockets.sync.client import connect

    shutil.copy(os.path.join(os.path.dirname(__file__), "ws_echo_app.py"), tmp_path)  # Ray's example app
    proc, port, lines = _start(env, tmp_path, "ws_echo_app:EchoServer", "--port", "0")
    with _stopped_by_ctrl_c(proc, lines) as out:
        with connect(f"ws://127.0.0.1:{port}/", open_timeout=30) as ws:
            ws.send("Eureka!")
            assert ws.recv(timeout=30) == "Eureka!"
        status = json.loads(_muster(env, tmp_path, "serve", "status", "--json").stdout)
        assert status["http"]["server"] == "uvicorn"
    assert "moving the HTTP ingress" not in "".join(out)

"""The zygote forked from the driver, and the fresh-interpreter fallback.

Each test runs a small driver script as its own process (a pytest process has
threads of its own, so the engine in it never forks itself): one that is safe
to fork, and ones that are not.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

TIMEOUT = 120

_DRIVER = r"""
import json, logging, os, sys, threading, time
import torch  # the driver holds torch: the forked zygote must not import it again
import muster
from muster.core.local import zygote as zygote_mod

mode, out = sys.argv[1], sys.argv[2]
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
held = open(os.path.join(out, "held-by-driver.txt"), "w")   # must not stay open in the zygote or workers
r, w = os.pipe()                                              # nor the write end of this pipe
stop = threading.Event()
if mode == "thread":
    threading.Thread(target=stop.wait, name="users-thread", daemon=True).start()
if mode.startswith("nvidia="):  # a stand-in for one of NVIDIA's libraries, loaded as torch loads it
    import ctypes
    ctypes.CDLL(mode.split("=", 1)[1])
driver_seed = torch.initial_seed()  # workers must not continue the driver's torch random stream
print("buffered before the engine started", end="")          # must reach the terminal once, not per process

rt = muster.init(num_cpus=2, num_gpus=0)


@muster.remote
def probe():
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return {"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "fds": fds,
            "initialised": muster.is_initialized(), "torch_seed": torch.initial_seed(),
            "comm": open("/proc/self/comm").read().strip()}


info = muster.get(probe.remote(), timeout=60)
zpid = rt._zygote.pid


def rss_file_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


zygote_rss_file_kib = None
if "--shed" in sys.argv:  # an idle zygote sheds its library pages after a few seconds
    deadline = time.monotonic() + 30
    while rss_file_kib(zpid) > 10 * 1024 and time.monotonic() < deadline:
        time.sleep(0.2)
    zygote_rss_file_kib = rss_file_kib(zpid)
zygote_fds = sorted(os.readlink(f"/proc/{zpid}/fd/{fd}") for fd in os.listdir(f"/proc/{zpid}/fd"))
stop.set()
os.close(w)
eof = os.read(r, 1) == b""  # our write end is closed; EOF proves no child kept a copy
json.dump({"forked": rt.zygote_forked, "driver_torch_seed": driver_seed, "zygote_pid": zpid,
           "driver_pid": os.getpid(),
           "zygote_comm": open(f"/proc/{zpid}/comm").read().strip(), "zygote_sid": os.getsid(zpid),
           "zygote_fds": zygote_fds, "worker": info, "zygote_rss_file_kib": zygote_rss_file_kib, "pipe_eof": eof,
           "held": os.path.realpath(held.name)}, open(os.path.join(out, "report.json"), "w"))
muster.shutdown()
print("\ndriver done")
"""


def _run(tmp_path, mode: str, *flags: str, **env: str) -> tuple[dict, str]:
    """The driver's report and output; ``--shed`` waits for the idle zygote to shed its library pages."""
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    full_env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
    full_env.update(env)
    proc = subprocess.run([sys.executable, str(script), mode, str(tmp_path), *flags], capture_output=True, text=True,
                          timeout=TIMEOUT, env=full_env, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    with open(tmp_path / "report.json") as f:
        return json.load(f), output


def test_a_safe_driver_forks_its_zygote_which_holds_no_driver_files(tmp_path):
    report, output = _run(tmp_path, "plain", "--shed")
    assert report["forked"], output
    worker = report["worker"]
    assert report["zygote_comm"] == "muster-zygote"
    assert report["zygote_sid"] == report["zygote_pid"], "the zygote leads its own session (Ctrl-C skips it)"
    assert worker["ppid"] == report["zygote_pid"]
    assert worker["comm"] != "muster-zygote"
    assert not worker["initialised"], "a worker must not think it owns the driver's engine"
    assert worker["torch_seed"] != report["driver_torch_seed"], "a worker must not share the driver's torch seed"
    assert report["pipe_eof"], "a child kept the driver's pipe open"
    held = report["held"]
    assert held not in report["zygote_fds"], report["zygote_fds"]
    assert held not in worker["fds"].values(), worker["fds"]
    assert output.count("buffered before the engine started") == 1, output
    assert report["zygote_rss_file_kib"] <= 10 * 1024, "the idle zygote should have shed its library pages"
    assert "fresh interpreter" not in output


def test_a_driver_running_another_thread_starts_a_fresh_zygote_and_says_why(tmp_path):
    report, output = _run(tmp_path, "thread")
    assert not report["forked"]
    assert "starting the zygote as a fresh interpreter, not a fork" in output
    assert "users-thread" in output, output
    assert report["worker"]["ppid"] == report["zygote_pid"]
    assert report["pipe_eof"]


_STAND_IN = """
/* Device counts as NVIDIA's libraries answer them before they are started: CUDA_ERROR_NOT_INITIALIZED (3)
   before cuInit, NVML_ERROR_UNINITIALIZED (1) before nvmlInit. */
int cuDeviceGetCount(int *count) { *count = STARTED; return STARTED ? 0 : 3; }
int nvmlDeviceGetCount_v2(unsigned *count) { *count = STARTED; return STARTED ? 0 : 1; }
"""


def _stand_in(folder, soname: str, started: bool) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no C compiler here to build a stand-in {soname}")
    folder.mkdir()
    source, lib = folder / "stand_in.c", folder / soname
    source.write_text(_STAND_IN)
    subprocess.run([cc, "-shared", "-fPIC", f"-DSTARTED={int(started)}", f"-Wl,-soname,{soname}",
                    "-o", str(lib), str(source)], check=True, capture_output=True, timeout=60)
    return str(lib)


@pytest.mark.parametrize(
    "soname, started, reason",
    [
        # On an H200 (torch 2.11, CUDA 13) `import torch` maps libcuda without starting it, and a child
        # forked then uses the GPU; after torch.cuda.is_available() (which starts it) a forked child cannot.
        ("libcuda.so.1", True, "the CUDA driver was started in the driver"),
        ("libcuda.so.1", False, None),
        # torch.cuda.device_count() leaves NVML started; on an H200, workers forked (through the zygote)
        # from such a driver counted 0 GPUs.
        ("libnvidia-ml.so.1", True, "NVML was started in the driver"),
    ],
    ids=["cuda-started", "cuda-mapped-only", "nvml-started"],
)
def test_the_zygote_is_forked_unless_the_driver_started_cuda_or_nvml(tmp_path, soname, started, reason):
    lib = _stand_in(tmp_path / "lib", soname, started)
    report, output = _run(tmp_path, f"nvidia={lib}")
    assert report["forked"] is (reason is None), output
    if reason:
        assert reason in output, output
    assert report["worker"]["ppid"] == report["zygote_pid"]


def test_muster_zygote_fork_0_turns_the_fork_off(tmp_path):
    report, output = _run(tmp_path, "plain", MUSTER_ZYGOTE_FORK="0")
    assert not report["forked"]
    assert "MUSTER_ZYGOTE_FORK=0" in output
    assert report["zygote_comm"] != "muster-zygote"
    assert report["zygote_sid"] == report["zygote_pid"]


_TORCHLESS = r"""
import sys, tempfile
import muster
from muster import tune
from muster.train._internal import resume


def trial(config):
    import random
    import sys

    random.seed(7)
    tune.report({"step": 1})
    tune.report({"torch_in_worker": "torch" in sys.modules})


grid = tune.Tuner(trial, tune_config=tune.TuneConfig(num_samples=1),
                  run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0)).fit()
state = resume.load(resume.book().capture(), own_rng=True)  # the torch-less format round-trips
assert "torch" not in state["rng"] and state["rng"]["python"][1][:3] == __import__("random").getstate()[1][:3]
print("RESULT", grid[0].metrics["torch_in_worker"], "torch" in sys.modules)
"""


def _run_script(tmp_path, text: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run ``text`` as a driver script with the default preload; it must exit 0."""
    script = tmp_path / "driver_script.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS", "MUSTER_PRELOAD")}
    env.update(extra_env)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.skipif(os.path.isdir("/proc/driver/nvidia/gpus"), reason="with GPUs the engine asks torch to count them")
def test_a_driver_without_torch_runs_tune_trials_that_never_import_it(tmp_path):
    proc = _run_script(tmp_path, _TORCHLESS)
    assert "RESULT False False" in proc.stdout, proc.stdout + proc.stderr


_PRELOAD_BY_NEED = r"""
import gc, json, sys, tempfile
import torch  # a PyTorch user's driver: the zygote preloads torch
import muster
import muster.train as train
from muster import tune
from muster.train import ScalingConfig
from muster.train.torch import TorchTrainer

DRIVER_GC = gc.isenabled(), gc.get_threshold()


def held():
    return {"torch": "torch" in sys.modules, "dynamo": "torch._dynamo" in sys.modules,
            # the zygote imports without full collections: they must be back in the workers, and what
            # they inherited frozen (their collections never walk, so never copy, those objects)
            "gc_as_driver": (gc.isenabled(), gc.get_threshold()) == DRIVER_GC,
            "frozen": gc.get_freeze_count() > 10_000}


def trial(config):
    tune.report(held())


def loop():
    train.report(held())  # before the loop builds DDP: what the zygote handed over


muster.init(num_cpus=2, num_gpus=0)
storage = tempfile.mkdtemp()
grid = tune.Tuner(trial, tune_config=tune.TuneConfig(num_samples=1),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
KEYS = ("torch", "dynamo", "gc_as_driver", "frozen")
trial_held = {k: grid[0].metrics[k] for k in KEYS}
result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                      run_config=train.RunConfig(storage_path=storage, verbose=0)).fit()
print("RESULT", json.dumps({"trial": trial_held, "trainer": {k: result.metrics[k] for k in KEYS}}))
"""


@pytest.mark.parametrize("fork", ["1", "0"])  # a zygote forked from the driver, or a fresh interpreter
def test_ddp_modules_are_preloaded_for_a_torch_trainer_not_for_tune_function_trials(tmp_path, fork):
    proc = _run_script(tmp_path, _PRELOAD_BY_NEED, MUSTER_ZYGOTE_FORK=fork)
    output = proc.stdout + proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, output
    held = json.loads(line[len("RESULT "):])
    # A function trial's worker gets torch warm, but not torch._dynamo (2-4 s to import, ~2x slower forks).
    assert held["trial"] == {"torch": True, "dynamo": False, "gc_as_driver": True, "frozen": True}, output
    # A TorchTrainer asked for DDP's modules: its workers start with them already imported.
    assert held["trainer"] == {"torch": True, "dynamo": True, "gc_as_driver": True, "frozen": True}, output


_SMAPS = """\
7f0000000000-7f0000002000 r--p 00000000 fe:00 11   /usr/lib/libclean.so
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000002000-7f0000003000 r--p 00002000 fe:00 11   /usr/lib/libclean.so
Rss:                   4 kB
Anonymous:             4 kB
Swap:                  0 kB
7f0000003000-7f0000004000 r--p 00003000 fe:00 11   /usr/lib/libclean.so
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  4 kB
7f0000004000-7f0000005000 rw-p 00004000 fe:00 11   /usr/lib/libclean.so
Anonymous:             0 kB
Swap:                  0 kB
7f0000005000-7f0000006000 r-xp 00000000 00:00 0    [vdso]
Anonymous:             0 kB
Swap:                  0 kB
7f0000006000-7f0000008000 r-xp 00000000 fe:00 12   /usr/lib/libcode.so
Anonymous:             0 kB
"""


def test_an_idle_zygote_drops_only_pages_its_files_hold_unchanged():
    """Only clean read-only file mappings are dropped: never one with an anonymous copy, resident
    (relocated data) or swapped out (dropping it would bring back the file's original bytes)."""
    from muster.core.local.zygote import droppable_mappings

    assert droppable_mappings(_SMAPS.splitlines(True)) == [(0x7F0000000000, 0x7F0000002000)]


def test_dropping_file_pages_keeps_a_private_copy_made_read_only(tmp_path):
    """For real: a file page written privately, then made read-only, keeps what was written."""
    script = r"""
import ctypes, mmap, sys
from muster.core.local import zygote

path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"file" * 2048)
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
with open(path, "rb+") as f:
    copied = mmap.mmap(f.fileno(), 8192, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    clean = mmap.mmap(f.fileno(), 8192, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
copied[:4] = b"mine"
address = ctypes.addressof(ctypes.c_char.from_buffer(copied))
assert libc.mprotect(address, 8192, mmap.PROT_READ) == 0  # now r--p, with one anonymous page
assert clean[:4] == b"file"
with open("/proc/self/smaps") as f:
    dropped = zygote.droppable_mappings(f)
ours = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in open("/proc/self/maps") if path in line]
assert len(ours) == 2, ours  # the copy and the clean mapping, both r--p now
assert [m for m in ours if m in dropped] == [m for m in ours if not m[0] <= address < m[1]], (ours, dropped)
zygote._drop_file_pages()
print(copied[:4].decode(), clean[:4].decode())
"""
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data.bin")], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mine", "file"]


@pytest.mark.parametrize("worker", [False, True], ids=["zygote", "worker"])
def test_a_fresh_interpreter_start_warns_nothing(monkeypatch, tmp_path, worker):
    """The fresh zygote and the fresh worker run muster's module exactly once: with runtime warnings
    made errors, one that connects to no driver exits cleanly instead of failing on runpy's warning
    about a module executed twice (which users saw on their terminal at each start)."""
    from muster.core.local import zygote_process

    monkeypatch.setenv("PYTHONWARNINGS", "error::RuntimeWarning")
    nowhere = str(tmp_path / "no-driver.sock")
    if worker:
        log = socket.socket(socket.AF_UNIX)
        log.bind(str(tmp_path / "log.sock"))
        log.listen(1)
        log.settimeout(TIMEOUT)
        spec = {"address": nowhere, "authkey": b"k", "sys_path": sys.path, "worker_id": 1, "node_id": "n",
                "label": "w", "log_address": str(tmp_path / "log.sock"),
                "env": dict(os.environ), "cwd": str(tmp_path)}
        proc = zygote_process.spawn_worker(spec)
    else:
        proc = zygote_process.spawn(nowhere, b"k", [])
    assert proc.wait(TIMEOUT) == (1 if worker else 0)
    if worker:  # it failed only where it should: connecting to the driver, after its log was attached
        conn, _ = log.accept()
        conn.settimeout(10)
        text = b""
        while chunk := conn.recv(65536):
            text += chunk
        assert b"RuntimeWarning" not in text and b"FileNotFoundError" in text, text.decode(errors="replace")


_BY_HAND = r"""
import os, sys
sys.path.insert(0, sys.argv[1])  # muster from a checkout, put on sys.path by hand: not installed here
import muster

@muster.remote
def where():
    return os.path.dirname(muster.__file__)

muster.init(num_cpus=1, num_gpus=0)
print("worker found muster in", muster.get(where.remote(), timeout=60))
muster.shutdown()
"""


def test_a_driver_with_muster_on_sys_path_by_hand_starts_fresh_interpreters_that_find_it(tmp_path):
    import site
    import sysconfig

    import muster

    src = os.path.dirname(os.path.dirname(muster.__file__))
    venv = tmp_path / "venv"  # sees this environment's packages (torch, ...) but not muster's install
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    ours = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if os.path.isdir(p)]
    with open(os.path.join(purelib, "ours.pth"), "w") as f:
        f.write("\n".join(ours) + "\n")  # a path line: its folder's own .pth files (muster's install) are not read
    hidden = subprocess.run([str(python), "-c", "import muster"], capture_output=True, timeout=60)
    assert hidden.returncode != 0, "muster must not be importable in this venv without the driver's sys.path"
    script = tmp_path / "driver.py"
    script.write_text(_BY_HAND)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUSTER_ADDRESS", "RAY_ADDRESS")}
    env["MUSTER_ZYGOTE_FORK"] = "0"  # the fresh interpreter start (as a Serve ingress always is)
    proc = subprocess.run([str(python), str(script), src], capture_output=True, text=True, timeout=TIMEOUT,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"worker found muster in {os.path.join(src, 'muster')}" in proc.stdout

"""``muster.init`` takes Ray's ``ray.init`` keywords: honoured ones act, the rest are no-ops, none is a TypeError."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import muster
from muster.core import api

SCRIPT = textwrap.dedent("""
    import logging, os
    import muster as ray

    ray.init(
        num_cpus=2, num_gpus=0, resources={"widget": 1}, address=None,
        configure_logging=True, logging_level="warning", logging_format="%(levelname)s|%(message)s",
        log_to_driver=False, include_dashboard=False, dashboard_host="127.0.0.1", dashboard_port=None,
        ignore_reinit_error=True, namespace="team", runtime_env={"env_vars": {"MUSTER_T_FLAG": "on"}},
        object_store_memory=10**8, _temp_dir="/tmp/unused", local_mode=False, job_config=None,
    )

    @ray.remote
    def shout():
        print("WORKER-OUTPUT-LINE", flush=True)
        return os.environ.get("MUSTER_T_FLAG")

    print("flag", ray.get(shout.remote(), timeout=60))
    print("widget", ray.cluster_resources().get("widget"))
    print("level", logging.getLogger("muster").level)
    ray.init(ignore_reinit_error=True, include_dashboard=True)  # a second call: no error
    ray.shutdown()
""")


def test_ray_init_keywords_in_a_ported_script(tmp_path):
    env = {**os.environ, "MUSTER_RUN_STORE": "0"}
    env.pop("MUSTER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "flag on" in lines  # runtime_env env_vars reached the worker
    assert "widget 1.0" in lines
    assert "level 30" in lines  # logging_level="warning"
    assert "WORKER-OUTPUT-LINE" not in out.stdout + out.stderr  # log_to_driver=False


def test_unknown_keyword_is_a_type_error_naming_it(monkeypatch):
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(TypeError, match="num_cpu\\b.*log_to_driver"):
        muster.init(num_cpu=2)
    assert api._runtime is None


def test_bad_honoured_values_name_the_fix(monkeypatch):
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(ValueError, match="logging_level='loud'"):
        muster.init(logging_level="loud")
    with pytest.raises(TypeError, match="env_vars maps names to string values"):  # Ray's is a TypeError too
        muster.init(runtime_env={"env_vars": {"A": 1}})
    assert api._runtime is None


HOOK_SCRIPT = textwrap.dedent("""
    import logging, os, sys
    import muster as ray

    def setup():
        os.environ["HOOKED"] = str(os.getpid())
        logging.basicConfig(level=logging.INFO, format="hooked-log %(message)s")

    @ray.remote
    def hooked():
        logging.info("from the task")
        return os.environ.get("HOOKED")

    @ray.remote
    class Actor:
        def __init__(self):
            self.seen = os.environ.get("HOOKED") == str(os.getpid())

        def seen_in_init(self):
            return self.seen

    def bad():
        raise RuntimeError("the hook broke")

    def say(*words):  # one write per line: the workers' relayed output cannot land inside it
        sys.stdout.write(" ".join(map(str, words)) + "\\n")

    ray.init(num_cpus=1, num_gpus=0, runtime_env={"worker_process_setup_hook": setup})
    say("driver", os.environ.get("HOOKED"))
    say("task", ray.get(hooked.remote(), timeout=60) not in (None, str(os.getpid())))
    say("actor", ray.get(Actor.remote().seen_in_init.remote(), timeout=60))
    ray.shutdown()
    ray.init(num_cpus=1, num_gpus=0, runtime_env={"worker_process_setup_hook": "hookmod.setup"})
    say("module", ray.get(hooked.remote(), timeout=60))
    ray.shutdown()
    ray.init(num_cpus=1, num_gpus=0)  # a later job without a hook: its workers run none
    say("later", ray.get(hooked.remote(), timeout=60))
    ray.shutdown()
    ray.init(num_cpus=1, num_gpus=0, runtime_env={"worker_process_setup_hook": bad})
    try:
        ray.get(hooked.options(max_retries=0).remote(), timeout=60)
    except ray.exceptions.WorkerCrashedError:
        say("failing hook: worker crashed")
    ray.shutdown()
""")


def test_worker_process_setup_hook_runs_once_in_each_worker_before_its_first_call(tmp_path):
    """Ray's runtime_env={"worker_process_setup_hook": f} at init: a function (or module.function path)
    every worker runs as it starts; its docs configure worker logging with it."""
    (tmp_path / "hookmod.py").write_text("import os\n\ndef setup():\n    os.environ['HOOKED'] = 'module'\n")
    here = os.path.dirname(os.path.dirname(muster.__file__))  # the script imports this muster, from any cwd
    env = {**os.environ, "MUSTER_RUN_STORE": "0",
           "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    env.pop("MUSTER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", HOOK_SCRIPT], capture_output=True, text=True, timeout=240,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if not line.startswith("(")]  # not the workers' output
    assert lines[:6] == ["driver None", "task True", "actor True", "module module", "later None",
                         "failing hook: worker crashed"], out.stdout + out.stderr
    both = out.stdout + out.stderr
    assert "hooked-log from the task" in both  # the logging the hook configured, relayed to the driver
    assert "worker_process_setup_hook" in both and "RuntimeError: the hook broke" in both
    assert "UserWarning" not in out.stderr  # init honours the key: no "has no effect" warning


def test_a_bad_worker_process_setup_hook_is_refused_at_init(monkeypatch):
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(TypeError, match="worker_process_setup_hook': 5.*pass a function"):
        muster.init(runtime_env={"worker_process_setup_hook": 5})
    with pytest.raises(ValueError, match="'module.function'"):
        muster.init(runtime_env={"worker_process_setup_hook": "setup"})
    assert api._runtime is None


JOB_CONFIG_SCRIPT = textwrap.dedent("""
    import os
    import muster as ray
    from muster.job_config import JobConfig

    job = JobConfig(runtime_env={"env_vars": {"MUSTER_T_JOB": "from-job"}}, ray_namespace="jobns",
                    default_actor_lifetime="non_detached")
    job.set_metadata("submitter", "foo")
    ray.init(num_cpus=2, job_config=job)

    @ray.remote
    def env():
        return os.environ.get("MUSTER_T_JOB"), ray.get_runtime_context().namespace

    print("job", *ray.get(env.remote(), timeout=60))
    ray.shutdown()
    ray.init(num_cpus=2, namespace="mine", runtime_env={"env_vars": {"MUSTER_T_JOB": "from-init"}},
             job_config=ray.job_config.JobConfig.from_json({"runtime_env": {"env_vars": {"MUSTER_T_JOB": "x"}},
                                                            "ray_namespace": "jobns"}))
    print("init", *ray.get(env.remote(), timeout=60))
    ray.shutdown()
""")


def test_a_job_configs_runtime_env_and_namespace_apply_unless_init_gives_its_own(tmp_path):
    """Ray's ``ray.init(job_config=JobConfig(...))`` (its JobConfig docstring examples): ``from ray.job_config
    import JobConfig`` was a ModuleNotFoundError, and the job's runtime_env and namespace were ignored."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS", "MUSTER_T_JOB")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(muster.__file__)), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", JOB_CONFIG_SCRIPT], capture_output=True, text=True, timeout=240,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "job from-job jobns" in out.stdout and "init from-init mine" in out.stdout, out.stdout


def test_job_config_checks_the_actor_lifetime_and_the_runtime_env():
    from muster.exceptions import InvalidArgumentError, InvalidTypeError
    from muster.job_config import JobConfig

    with pytest.raises(InvalidArgumentError, match="'forever'.*'detached' or 'non_detached'"):
        JobConfig(default_actor_lifetime="forever")
    with pytest.raises(InvalidTypeError, match="runtime_env='x'"):
        JobConfig(runtime_env="x")
    assert JobConfig.from_json({"metadata": {"a": "b"}}).metadata == {"a": "b"}


ENV_VARS_SCRIPT = textwrap.dedent("""
    import os
    import muster as ray

    # the seed overview's "Environment variables not reaching workers" fix, verbatim
    ray.init(runtime_env={"env_vars": {"HF_TOKEN": "hf_xxx", "CUDA_VISIBLE_DEVICES": "0,1"}})

    @ray.remote
    def env():
        return os.environ.get("HF_TOKEN"), os.environ.get("CUDA_VISIBLE_DEVICES")

    print("gpus", ray.cluster_resources().get("GPU", 0))
    print("task", *ray.get(env.remote(), timeout=60))
    ray.shutdown()
""")


def test_runtime_env_cuda_visible_devices_reaches_the_workers_and_adds_no_gpu(tmp_path):
    """On a machine with no GPU, ``runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "0,1"}}`` made the engine
    count 2 GPUs it does not have, and its workers (holding none of them) then saw ``CUDA_VISIBLE_DEVICES=''``.
    In Ray the node's GPUs come from the node, and a task without GPUs keeps the runtime_env's value."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS", "HF_TOKEN")}
    env.update(MUSTER_RUN_STORE="0", CUDA_VISIBLE_DEVICES="")  # this machine shows no GPU, whatever it has
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(muster.__file__)), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", ENV_VARS_SCRIPT], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "gpus 0" in out.stdout.splitlines() and "task hf_xxx 0,1" in out.stdout.splitlines(), out.stdout

"""``runtime_env`` ``working_dir`` and ``py_modules`` given as local paths, applied as Ray 2.60 applies them.

Checked against Ray 2.60 (``ray.init(address="local", runtime_env={"working_dir": d, "excludes": [...],
"py_modules": [pkg]})``): a task's current directory is a copy of ``d`` taken at ``init`` (a file changed after
does not show), first among the user's ``sys.path`` entries (``import mymod``, ``open("data.txt")``); what it
writes there never reaches ``d``; ``excludes`` and ``d/.gitignore`` leave files out; the package is importable;
a task's ``runtime_env`` is merged into the job's key by key (``env_vars`` name by name). Ray refuses a local
folder in a task's or actor's own ``runtime_env`` (only at ``ray.init``); muster applies it there too, over the
job's.
"""

from __future__ import annotations

import os
import sys

import pytest

import muster
from muster.core import api
from muster.exceptions import InvalidArgumentError
from muster.runtime_env import working_dir


def _probe() -> dict:
    import mymod  # from the working_dir's copy

    with open("written.txt", "w") as f:  # stays in the copy
        f.write("w")
    with open("data.txt") as f:
        data = f.read()
    files = sorted(os.path.relpath(os.path.join(d, n), ".") for d, _, ns in os.walk(".") for n in ns)
    try:
        import mypkg

        pkg = mypkg.NAME
    except ImportError:
        pkg = None
    return {"cwd": os.getcwd(), "first": sys.path[0], "who": mymod.WHO, "data": data, "files": files, "pkg": pkg,
            "A": os.environ.get("A"), "B": os.environ.get("B")}


def _folder(path, who: str):
    path.mkdir()
    (path / "mymod.py").write_text(f"WHO = {who!r}\n")
    (path / "data.txt").write_text(f"{who} data")
    (path / "skip.bin").write_text("left out by excludes")
    (path / "logs").mkdir()
    (path / "logs" / "a.log").write_text("left out by excludes")
    (path / ".gitignore").write_text("ignored.txt\n")
    (path / "ignored.txt").write_text("left out by .gitignore")
    return path


@pytest.fixture
def trees(tmp_path):
    package = tmp_path / "modules" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("NAME = 'mypkg'\n")
    return _folder(tmp_path / "job", "job"), _folder(tmp_path / "task", "task"), package


_EXCLUDES = ["skip.bin", "logs/"]


def test_a_task_and_an_actor_run_in_a_copy_of_their_working_dir(trees):
    _, folder, package = trees
    env = {"working_dir": str(folder), "excludes": _EXCLUDES, "py_modules": [str(package)]}
    seen = muster.get(muster.remote(_probe).options(runtime_env=env).remote())
    assert (seen["who"], seen["data"], seen["pkg"]) == ("task", "task data", "mypkg")
    assert seen["cwd"] == seen["first"] != str(folder)
    assert seen["files"] == [".gitignore", "data.txt", "mymod.py", "written.txt"]  # excludes and .gitignore
    assert not (folder / "written.txt").exists()  # writes stay in the copy

    @muster.remote
    class Probe:
        def probe(self):
            return _probe()

    actor = Probe.options(runtime_env={"working_dir": str(folder)}).remote()
    first, second = muster.get([actor.probe.remote(), actor.probe.remote()])  # for its whole life
    assert first["who"] == second["who"] == "task" and first["cwd"] == second["cwd"] != str(folder)
    assert "skip.bin" in first["files"]  # other excludes: another copy
    muster.kill(actor)


def test_a_task_leaves_the_directory_path_and_modules_of_the_worker_as_they_were(trees):
    _, folder, _ = trees
    dirs = working_dir.resolve({"working_dir": str(folder)}, "test")
    cwd, path = os.getcwd(), list(sys.path)
    with working_dir.applied(dirs):
        import mymod

        assert mymod.WHO == "task" and os.getcwd() == dirs.working_dir
    assert (os.getcwd(), sys.path, "mymod" in sys.modules) == (cwd, path, False)


def test_a_folder_over_rays_limit_is_refused_where_given_naming_it_and_excludes(tmp_path):
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(working_dir.MAX_BYTES)  # sparse: counted, never written
    task = muster.remote(_probe)
    with pytest.raises(InvalidArgumentError, match=rf"working_dir'\] {str(tmp_path)!r} holds 512.00 MiB.*excludes"):
        task.options(runtime_env={"working_dir": str(tmp_path)})
    task.options(runtime_env={"working_dir": str(tmp_path), "excludes": ["*.bin"]})


def test_a_uri_still_warns_and_a_local_folder_does_not(tmp_path, recwarn):
    task = muster.remote(_probe)
    task.options(runtime_env={"working_dir": str(tmp_path), "py_modules": [str(tmp_path)]})
    assert not [w for w in recwarn if "runtime_env" in str(w.message)]
    with pytest.warns(UserWarning, match="runtime_env working_dir has no effect"):
        task.options(runtime_env={"working_dir": "s3://bucket/code.zip"})


@pytest.fixture
def job_engine(monkeypatch):
    """A job of its own (its runtime_env), in place of the session engine for one test."""
    monkeypatch.setattr(api, "_runtime", None)
    yield
    muster.shutdown()


def test_inits_working_dir_is_every_workers_and_a_tasks_own_replaces_it(trees, job_engine):
    job, task_folder, package = trees
    muster.init(num_cpus=1, num_gpus=0, runtime_env={
        "working_dir": str(job), "excludes": _EXCLUDES, "py_modules": [str(package)], "env_vars": {"A": "job"}})
    (job / "data.txt").write_text("changed after init")  # not seen: copied at init
    probe = muster.remote(_probe)
    seen = muster.get(probe.remote())
    assert (seen["who"], seen["data"], seen["pkg"], seen["A"]) == ("job", "job data", "mypkg", "job")
    assert seen["files"] == [".gitignore", "data.txt", "mymod.py", "written.txt"]
    assert not (job / "written.txt").exists()
    own = muster.get(probe.options(runtime_env={"working_dir": str(task_folder), "env_vars": {"B": "task"}}).remote())
    assert (own["who"], own["data"], own["pkg"], own["A"], own["B"]) == ("task", "task data", "mypkg", "job", "task")
    assert seen["cwd"] not in own["cwd"]
    again = muster.get(probe.remote())  # the job's again, modules included
    assert (again["who"], again["cwd"], again["B"]) == ("job", seen["cwd"], None)
    copies = os.path.dirname(seen["cwd"])
    muster.shutdown()
    assert not os.path.exists(copies)  # removed with the session


def _train_loop(config):
    import mymod

    from muster import train

    train.report({"who": mymod.WHO, "data": open("data.txt").read()})


def test_train_workers_started_after_init_run_in_its_working_dir(trees, job_engine, tmp_path):
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    job, _, _ = trees
    muster.init(num_cpus=1, num_gpus=0, runtime_env={"working_dir": str(job)})
    result = TorchTrainer(_train_loop, scaling_config=ScalingConfig(num_workers=1),
                          run_config=RunConfig(storage_path=str(tmp_path / "runs"))).fit()
    assert result.metrics == {"who": "job", "data": "job data"}

"""The `muster` command on a real run folder."""

from __future__ import annotations

import subprocess
import sys

import muster.train as train
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "muster.cli", *args], capture_output=True, text=True, timeout=60)


def test_runs_list_and_show(storage):
    def loop():
        train.report({"loss": 0.5})

    TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="cli_run", storage_path=storage, verbose=0)).fit()
    listing = _cli("runs", "list", "--storage-path", storage)
    assert listing.returncode == 0, listing.stderr
    assert "cli_run" in listing.stdout and "FINISHED" in listing.stdout
    shown = _cli("runs", "show", "cli_run", "--storage-path", storage)
    assert shown.returncode == 0, shown.stderr
    assert "FINISHED" in shown.stdout and '"loss": 0.5' in shown.stdout and "reports    2" in shown.stdout
    missing = _cli("runs", "show", "nope", "--storage-path", storage)
    assert missing.returncode == 2 and "muster runs list" in missing.stderr


def test_status_and_version():
    status = _cli("status")
    assert status.returncode == 0 and "CPU=" in status.stdout
    version = _cli("--version")
    assert version.returncode == 0 and "muster" in version.stdout


def test_python_dash_m_muster_is_the_muster_command():
    """``python -m muster`` runs the CLI as the console script does (it failed: muster had no ``__main__``)."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "muster", *args], capture_output=True, text=True, timeout=60)

    status = run("status")
    assert status.returncode == 0, status.stderr
    assert "CPU=" in status.stdout
    helped = run("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: muster "), helped.stdout
    wrong = run("up")  # the CLI's own answer and exit status come through
    assert wrong.returncode == 2 and "there is no `muster up`" in wrong.stderr


def test_ray_cluster_commands_say_what_to_do_instead():
    # The Ray tutorials' first steps are `ray start --head --port=6379` and `ray stop`.
    started = _cli("start", "--head", "--port=6379")
    assert started.returncode == 2
    assert "no `muster start`" in started.stderr and "ray start --head" in started.stderr
    assert 'muster.init(address="auto")' in started.stderr and "docs/multi-node.md" in started.stderr
    stopped = _cli("stop")
    assert stopped.returncode == 2 and "ends with the script" in stopped.stderr and "ray stop" in stopped.stderr


def test_logs_and_show_read_the_run_store(storage):
    import os
    import signal

    def loop(config):
        rank = train.get_context().get_world_rank()
        for step in range(2):
            print(f"step {step} on rank {rank}", flush=True)
            train.report({"loss": 1.0 / (step + 1)})
        if rank == 1 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    from muster.train import FailureConfig

    TorchTrainer(loop, train_loop_config={"marker": f"{storage}.killed"}, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="logged", storage_path=storage, verbose=0,
                                      failure_config=FailureConfig(max_failures=1))).fit()
    logs = _cli("logs", "logged", "--rank", "1", "--storage-path", storage)
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines and all(line.startswith("(rank 1, pid=") for line in lines)
    assert [line.split(") ", 1)[1] for line in lines] == ["step 0 on rank 1", "step 1 on rank 1"] * 2
    tail = _cli("logs", "logged", "--tail", "1", "--storage-path", storage)
    assert len(tail.stdout.splitlines()) == 1
    shown = _cli("runs", "show", "logged", "--storage-path", storage)
    assert shown.returncode == 0, shown.stderr
    assert "attempt 0  FAILED" in shown.stdout and "attempt 1  FINISHED" in shown.stdout
    assert "failure 1:" in shown.stdout and "rank 1" in shown.stdout and "SIGKILL" in shown.stdout
    assert "   1 FINISHED" in shown.stdout  # the workers table of the last attempt
    missing = _cli("logs", "nope", "--storage-path", storage)
    assert missing.returncode == 2 and "muster runs list" in missing.stderr


def test_runs_list_includes_tune_trials(storage):
    from muster import tune

    def trainable(config):
        tune.report({"score": config["x"]})

    tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])},
               run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0)).fit()
    listing = _cli("runs", "list", "--storage-path", storage)
    assert listing.returncode == 0, listing.stderr
    trials = [line for line in listing.stdout.splitlines() if " exp " in f" {line} "]
    assert len(trials) == 2 and all("FINISHED" in line for line in trials)


def test_serve_run_takes_builder_arguments_before_and_after_options():
    """Ray's click CLI takes `serve run mod:builder --name x a=1 b=2`; argparse refused the pairs after an option."""
    from muster.cli import parse

    args = parse(["serve", "run", "mod:build", "who=ab", "--port", "0", "times=2", "--name", "x", "n=1"])
    assert (args.target, args.arguments, args.port, args.name) == ("mod:build", ["who=ab", "times=2", "n=1"], 0, "x")
    assert parse(["serve", "run", "--port", "0", "mod:build", "who=ab"]).arguments == ["who=ab"]
    bad = _cli("serve", "run", "mod:app", "--port", "0", "--prot", "1")  # anything else is still refused
    assert bad.returncode == 2 and "unrecognized arguments: --prot 1" in bad.stderr
    bad = _cli("status", "x=1")  # only serve run takes key=value
    assert bad.returncode == 2 and "unrecognized arguments: x=1" in bad.stderr

"""Ray Core calls made from a training loop or a Tune trial: tasks, actors, put and get.

Ray's guides launch nested tasks from a Train worker (for example to fan work
out past the worker's placement group). Before, muster's training workers sent
those requests to the run's controller, which answered None: ``.remote()``
returned None and the loop went on without a word.
"""

from __future__ import annotations

import pytest
import torch.distributed

import muster
import muster.train as train
import muster.util.state
from muster import tune
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer
from muster.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@muster.remote(num_cpus=1)
def square(x):
    return x * x


@muster.remote(num_cpus=0)
class Tally:
    def __init__(self):
        self.total = 0

    def add(self, n):
        self.total += n
        return self.total


def core_calls(rank: int) -> dict:
    refs = [square.remote(i) for i in range(3)]
    outside = square.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None)).remote(4)
    tally = Tally.options(name=f"tally-{rank}").remote()  # ends with the run, as in Ray
    Tally.options(name=f"kept-{rank}", lifetime="detached").remote()  # outlives it
    muster.get(tally.add.remote(rank + 1))
    return {
        "squares": muster.get(refs, timeout=60),
        "outside": muster.get(outside, timeout=60),
        "tally": muster.get(tally.add.remote(10), timeout=60),
        "put": muster.get(muster.put({"rank": rank}), timeout=60),
        # the worker's own resources, as in Ray's Train worker actors (was {}: no task or actor of muster's)
        "resources": muster.get_runtime_context().get_assigned_resources(),
        "gpus": muster.get_runtime_context().get_accelerator_ids()["GPU"],
        "ids": ids(),
        # Ray lists its Train workers among the actors (class RayTrainWorker); muster's were missing
        "listed": sorted(a.actor_id for a in muster.util.state.list_actors(
            filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")])),
    }


def ids() -> dict:
    """The runtime context's ids, twice: they stay the same through the loop."""
    ctx = muster.get_runtime_context()
    first = [ctx.get_job_id(), ctx.get_task_id(), ctx.get_actor_id(), ctx.get_node_id(), ctx.get_worker_id()]
    again = [ctx.get_job_id(), ctx.get_task_id(), ctx.get_actor_id(), ctx.get_node_id(), ctx.get_worker_id()]
    return {"job": first[0], "task": first[1], "actor": first[2], "node": first[3], "worker": first[4],
            "stable": first == again}


def assert_worker_ids(seen: list[dict], listed: list[str], resources: dict) -> None:
    """As in Ray's Train worker actors: each worker is an actor of the driver's job, running one task (the
    loop's call); the ids are distinct per worker, the node is the driver's."""
    driver = muster.get_runtime_context()
    for one in seen:
        assert one["stable"] and None not in one.values(), one
        assert (one["job"], one["node"]) == (driver.get_job_id(), driver.get_node_id())
        assert one["actor"].startswith(one["job"]) and one["task"].startswith(one["job"])
    for key in ("task", "actor", "worker"):
        assert len({one[key] for one in seen}) == len(seen), (key, seen)
    workers = {one["actor"] for one in seen}
    assert workers <= set(listed), (workers, listed)  # each was listed, alive, while the loop ran
    rows = [muster.util.state.get_actor(worker) for worker in workers]  # the suite's other actors come first
    assert {r.class_name for r in rows} == {"RayTrainWorker"} and len(rows) == len(seen)
    for row in rows:  # the run is over: dead, stopped by it, with the worker's job and resources
        assert (row.state, row.job_id, row.pid > 0) == ("DEAD", muster.get_runtime_context().get_job_id(), True)
        assert "stopped by its training run" in row.death_cause["actor_died_error_context"]["error_message"]
        assert row.required_resources == resources


def train_loop():
    rank = train.get_context().get_world_rank()
    calls = core_calls(rank)
    both: list = [None, None]
    torch.distributed.all_gather_object(both, calls["ids"])  # rank 0 reports its peer's ids too
    train.report({"rank": rank, **calls, "peer_ids": both[1 - rank]})


def trial(config):
    tune.report(core_calls(config["rank"]))


def test_a_training_loop_runs_tasks_and_actors(tmp_path):
    result = TorchTrainer(
        train_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path)),
    ).fit()
    assert result.error is None
    m = result.metrics  # rank 0's; rank 1 made the same calls at the same time
    assert (m["rank"], m["squares"], m["outside"], m["tally"], m["put"]) == (0, [0, 1, 4], 16, 11, {"rank": 0})
    assert (m["resources"], m["gpus"]) == ({"CPU": 1.0}, [])
    assert_worker_ids([m["ids"], m["peer_ids"]], m["listed"], {"CPU": 1.0})
    assert_only_detached_actors_outlive_it(ranks=(0, 1))


def test_a_tune_trial_runs_tasks_and_actors(tmp_path):
    grid = tune.Tuner(
        tune.with_resources(trial, {"cpu": 0.5}),
        param_space={"rank": 5},
        run_config=tune.RunConfig(storage_path=str(tmp_path)),
    ).fit()
    assert grid[0].error is None, grid[0].error
    m = grid[0].metrics
    assert (m["squares"], m["outside"], m["tally"], m["put"]) == ([0, 1, 4], 16, 16, {"rank": 5})
    assert (m["resources"], m["gpus"]) == ({"CPU": 0.5}, [])  # tune.with_resources's, as a Ray trial actor's
    assert_worker_ids([m["ids"]], m["listed"], {"CPU": 0.5})
    assert_only_detached_actors_outlive_it(ranks=(5,))


def assert_only_detached_actors_outlive_it(ranks):
    for rank in ranks:
        with pytest.raises(ValueError):
            muster.get_actor(f"tally-{rank}")
        kept = muster.get_actor(f"kept-{rank}")
        assert muster.get(kept.add.remote(1), timeout=60) == 1
        muster.kill(kept)

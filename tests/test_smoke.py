import muster.train as train
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def test_two_workers_report(storage):
    def loop(config):
        ctx = train.get_context()
        train.report({"rank": ctx.get_world_rank(), "x": config["x"]})

    result = TorchTrainer(
        loop, train_loop_config={"x": 3}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name="smoke"),
    ).fit()
    assert result.metrics["x"] == 3
    assert sorted(r["_rank"] for r in result.all_reports) == [0, 1]
    assert sorted(r["rank"] for r in result.all_reports) == [0, 1]

"""What ``print(result)`` and ``print(result_grid)`` show, as Ray 2.60's.

Read off Ray 2.60 (``ray.init(address="local", num_cpus=2)``) running the same three trials: one
reporting ``{"loss": 1.0, "acc": 0.9}`` with a checkpoint, one ``{"loss": 0.5, "nested": {"a": 1}}``
without, one raising. A trial's ``Result`` prints as::

    Result(
      metrics={'loss': 1.0, 'acc': 0.9},
      path='/.../exp/fn_b36f7_00000_0_x=1_...',
      filesystem='local',
      checkpoint=Checkpoint(filesystem=local, path=/.../checkpoint_000000)
    )

(its metrics without the keys Tune fills in; an ``error='RayTaskError(RuntimeError)'`` line first for a
failed trial, whose metrics are ``{}``), and ``ResultGrid`` as ``ResultGrid<[`` then each result
indented by two, joined by ``,``, then ``]>``. A ``TorchTrainer``'s ``Result`` (Ray Train V2's, a
dataclass) keeps the one-line dataclass repr with every reported key.
"""

from __future__ import annotations

import os
import tempfile

from muster import train, tune


# Ray 2.60's text for the trial that reported without a checkpoint, its path left to fill in
RAY_WITHOUT_CHECKPOINT = """Result(
  metrics={'loss': 0.5, 'nested': {'a': 1}},
  path='{path}',
  filesystem='local',
  checkpoint=None
)"""


def _three(config):
    if config["x"] == 3:
        raise RuntimeError("boom")
    if config["x"] == 2:
        tune.report({"loss": 0.5, "nested": {"a": 1}})
        return
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "f"), "w") as f:
        f.write("x")
    tune.report({"loss": 1.0, "acc": 0.9}, checkpoint=tune.Checkpoint.from_directory(folder))


def _expected(result, metrics, indent=0):
    pad, inner = " " * indent, " " * (indent + 2)
    lines = [f"{inner}error={type(result.error).__name__!r}"] if result.error is not None else []
    lines += [f"{inner}metrics={metrics!r}", f"{inner}path={result.path!r}", f"{inner}filesystem='local'",
              f"{inner}checkpoint={result.checkpoint!r}"]
    return f"{pad}Result(\n" + ",\n".join(lines) + f"\n{pad})"


def test_trial_result_and_grid_print_as_rays(storage):
    grid = tune.Tuner(
        _three, param_space={"x": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0),
    ).fit()
    by_x = {r.config["x"]: r for r in grid}
    with_ckpt, without, failed = by_x[1], by_x[2], by_x[3]
    assert with_ckpt.checkpoint is not None and without.checkpoint is None and failed.error is not None

    assert repr(with_ckpt) == str(with_ckpt) == _expected(with_ckpt, {"loss": 1.0, "acc": 0.9})
    assert repr(without) == _expected(without, {"loss": 0.5, "nested": {"a": 1}})
    assert repr(without) == RAY_WITHOUT_CHECKPOINT.replace("{path}", without.path)
    assert repr(failed).splitlines()[1] == f"  error={type(failed.error).__name__!r},"
    assert repr(failed) == _expected(failed, {})  # nothing reported: {} as Ray's

    shown = repr(grid)
    assert shown == str(grid)
    assert shown == "ResultGrid<[\n" + ",\n".join(_expected(r, _user(r), indent=2) for r in grid) + "\n]>"
    assert shown.count("  Result(\n") == 3 and "training_iteration" not in shown and "trial_id" not in shown


def _user(result):
    return result.metrics and {k: v for k, v in result.metrics.items() if k in ("loss", "acc", "nested")}


def _train_loop(config):
    train.report({"loss": 0.1, "training_iteration": 7})


def test_training_result_keeps_the_dataclass_repr(storage):
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    result = TorchTrainer(
        _train_loop, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=storage, name="run", verbose=0),
    ).fit()
    shown = repr(result)
    assert "\n" not in shown and shown.startswith("Result(metrics=")
    assert "'training_iteration': 7" in shown  # Ray Train V2 hides none of the reported keys

"""Every rank of a TorchTrainer draws its own numbers; enable_reproducibility() repeats a run."""

from __future__ import annotations

import muster.train as train


def draw_loop(config):
    import numpy as np
    import torch

    if config.get("seed") is not None:
        from muster.train.torch import enable_reproducibility

        enable_reproducibility(config["seed"])
    train.report({"np": float(np.random.random()), "torch": float(torch.rand(1).item())})


def _draws(result):
    return {row["_rank"]: (row["np"], row["torch"]) for row in result.all_reports}


def test_ranks_draw_distinct_values_and_a_seeded_run_repeats(fit):
    free = _draws(fit(draw_loop, workers=2, config={}, name="free"))
    assert sorted(free) == [0, 1]
    assert free[0][0] != free[1][0] and free[0][1] != free[1][1], free
    first = _draws(fit(draw_loop, workers=2, config={"seed": 5}, name="seeded1"))
    second = _draws(fit(draw_loop, workers=2, config={"seed": 5}, name="seeded2"))
    assert first == second, (first, second)

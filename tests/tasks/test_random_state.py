"""Forked workers get their own numpy and torch random streams (issue 17, bug 1).

Workers are forked from one zygote; without a reseed at fork every worker
would start from the zygote's numpy/torch state and draw the same numbers.
"""

from __future__ import annotations

import muster
from _task_helpers import TIMEOUT


@muster.remote
class Drawer:
    def draw(self):
        import numpy as np
        import torch

        return float(np.random.random()), float(torch.rand(1).item())

    def seeded(self, seed):
        import numpy as np
        import torch

        np.random.seed(seed)
        torch.manual_seed(seed)
        return float(np.random.random()), float(torch.rand(1).item())


@muster.remote
def draw():
    import numpy as np

    return float(np.random.random())


def test_many_tasks_draw_distinct_numpy_values():
    values = muster.get([draw.remote() for _ in range(12)], timeout=TIMEOUT)
    assert len(set(values)) == len(values), values


def test_each_worker_has_its_own_stream_and_seeds_still_repeat():
    actors = [Drawer.remote() for _ in range(3)]  # three fresh processes, forked from one zygote
    try:
        draws = muster.get([a.draw.remote() for a in actors], timeout=TIMEOUT)
        assert len({d[0] for d in draws}) == 3, draws  # numpy
        assert len({d[1] for d in draws}) == 3, draws  # torch
        seeded = muster.get([a.seeded.remote(123) for a in actors], timeout=TIMEOUT)
        assert len(set(seeded)) == 1, seeded  # an explicit seed gives the same stream everywhere
    finally:
        for a in actors:
            muster.kill(a)

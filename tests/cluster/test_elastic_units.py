"""Elastic runs without processes: ScalingConfig bounds, the sizing policies, and re-dealing an
interrupted epoch over a new world size."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from muster.train import ScalingConfig
from muster.train._internal import policies
from muster.train.torch.train_loop_utils import _EpochSampler


def test_scaling_config_takes_min_max():
    s = ScalingConfig(num_workers=(2, 4))
    assert s.elastic and (s.min_workers, s.max_workers) == (2, 4)
    assert s.total_resources == {"CPU": 4.0}
    fixed = ScalingConfig(num_workers=3)
    assert not fixed.elastic and fixed.min_workers == fixed.max_workers == 3


@pytest.mark.parametrize("bad", [(4, 2), (0, 2), (1,), (1, 2, 3), (1.5, 2), (True, 2)])
def test_scaling_config_rejects_bad_bounds(bad):
    with pytest.raises(ValueError, match=r"num_workers=.*\(min, max\)"):
        ScalingConfig(num_workers=bad)


def test_sizing_policies():
    assert policies.elastic_size(2, 4, 0) == 2  # below min: ask for min and wait
    assert policies.elastic_size(2, 4, 3) == 3
    assert policies.elastic_size(2, 4, 9) == 4
    assert policies.should_grow(2, 4, 1, True)
    assert not policies.should_grow(2, 4, 1, False)  # no checkpoint this attempt: too much to lose
    assert not policies.should_grow(4, 4, 2, True)
    assert not policies.should_grow(2, 4, 0, True)


def _shards(n, world, epoch, shuffle, **state):
    data = TensorDataset(torch.arange(n))
    out = []
    for rank in range(world):
        s = _EpochSampler(data, num_replicas=world, rank=rank, shuffle=shuffle, seed=7)
        s.set_epoch(epoch)
        s._passes = 1
        if state:
            s._reshard = (epoch, state["consumed"])
        out.append(list(iter(s)))
    return out


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("old, new, steps", [(4, 2, 3), (2, 4, 5), (3, 2, 4), (2, 3, 1)])
def test_resize_mid_epoch_neither_repeats_nor_skips(shuffle, old, new, steps):
    n = 30
    before = _shards(n, old, 1, shuffle)
    consumed = {i for shard in before for i in shard[:steps]}  # every rank took `steps` samples
    after = _shards(n, new, 1, shuffle, consumed=steps * old)
    rest = [i for shard in after for i in shard]
    assert not consumed & set(rest)  # nothing consumed before the resize comes again
    assert consumed | set(rest) == set(range(n))  # and nothing is skipped
    assert len({len(s) for s in after}) == 1  # every rank has as many steps (DDP stays in step)
    assert len(rest) - len(set(rest)) < new  # only the padding of the last round repeats

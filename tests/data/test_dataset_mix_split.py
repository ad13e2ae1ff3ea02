"""``Dataset.split``, ``Dataset.streaming_train_test_split`` and ``Dataset.mix``; the expected rows are Ray 2.60's
on the same input."""

from __future__ import annotations

import pytest

import muster.data as md
from muster.exceptions import InvalidArgumentError


def _ids(ds, col="id"):
    return sorted(r[col] for r in ds.take_all())


def test_hash_split_sends_the_same_keys_to_test_as_ray():
    train, test = md.range(8).streaming_train_test_split(test_size=0.25, split_type="hash", hash_column="id")
    assert (_ids(train), _ids(test)) == ([0, 2, 3, 4, 5, 6], [1, 7])
    items = md.from_items([{"k": s} for s in "abcdefghij"])
    train, test = items.streaming_train_test_split(0.5, split_type="hash", hash_column="k")
    assert (_ids(train, "k"), _ids(test, "k")) == (list("acefghj"), list("bdi"))


def test_random_split_is_a_partition_stable_across_passes_and_seeded():
    ds = md.range(4000).repartition(4)
    train, test = ds.streaming_train_test_split(0.25, seed=1)
    tr, te = _ids(train), _ids(test)
    assert sorted(tr + te) == list(range(4000)) and 800 < len(te) < 1200
    assert _ids(test) == te  # a second pass splits alike
    assert _ids(ds.streaming_train_test_split(0.25, seed=2)[1]) != te


@pytest.mark.parametrize("kwargs", [{"test_size": 1.0}, {"test_size": 0.2, "split_type": "hash"},
                                    {"test_size": 0.2, "split_type": "hash", "hash_column": "id", "seed": 1},
                                    {"test_size": 0.2, "hash_column": "id"}, {"test_size": 0.2, "split_type": "x"}])
def test_split_refuses_bad_arguments(kwargs):
    with pytest.raises(InvalidArgumentError, match="streaming_train_test_split"):
        md.range(4).streaming_train_test_split(**kwargs)


def test_mix_interleaves_blocks_as_ray_does():
    ds1 = md.from_items([{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}]).repartition(2)
    ds2 = md.from_items([{"x": 5}, {"x": 6}, {"x": 7}, {"x": 8}]).repartition(2)
    assert [r["x"] for r in ds1.mix(ds2, weights=[0.5, 0.5]).take_all()] == [1, 2, 5, 6, 3, 4, 7, 8]
    a, b = md.range(6).repartition(6), md.from_items([{"id": 100}, {"id": 101}]).repartition(2)
    assert [r["id"] for r in a.mix(b, weights=[2, 1]).take_all()] == [0, 100, 1, 2, 101, 3, 4, 5]
    assert [r["id"] for r in a.mix(b).take_all()] == [0, 100, 1, 101, 2, 3, 4, 5]
    shortest = a.mix(b, weights=[1, 1], stopping_condition=md.MixStoppingCondition.STOP_ON_SHORTEST)
    assert [r["id"] for r in shortest.take_all()] == [0, 100, 1, 101]


def test_mix_refuses_weights_that_do_not_fit():
    with pytest.raises(InvalidArgumentError, match=r"mix\(weights=\[1\]\): give 2 positive numbers"):
        md.range(2).mix(md.range(2), weights=[1])
    with pytest.raises(InvalidArgumentError, match="stopping_condition"):
        md.range(2).mix(md.range(2), stopping_condition="never")


# What Ray 2.60.0 gave for ray.data.range(rows).repartition(blocks).materialize().split(n) (run once by hand with
# ray.init(num_cpus=1)); its blocks were the sizes muster's repartition makes: (10, 5) 2 each, (10, 3) 3, 3, 4,
# (10, 7) 1, 1, 2, 1, 2, 1, 2, (20, 6) 3, 3, 4, 3, 3, 4.
@pytest.mark.parametrize("rows, blocks, n, ray_sizes", [
    (10, 5, 3, [4, 4, 2]), (10, 5, 2, [6, 4]), (12, 4, 3, [6, 3, 3]), (10, 3, 2, [6, 4]), (10, 7, 3, [4, 3, 3]),
    (20, 6, 4, [6, 7, 3, 4]), (10, 5, 5, [2, 2, 2, 2, 2])])
def test_split_hands_out_whole_consecutive_blocks_as_ray(rows, blocks, n, ray_sizes):
    ds = md.range(rows).repartition(blocks).materialize()
    parts = ds.split(n)
    assert [p.count() for p in parts] == ray_sizes
    assert [r["id"] for p in parts for r in p.take_all()] == list(range(rows))  # in order, each row once
    assert sum(p.num_blocks() for p in parts) == blocks


def test_split_with_fewer_blocks_than_parts_cuts_rows():
    """Ray 2.60 gives range(10).repartition(2).split(3) parts of 5, 5 and 0 rows (whole blocks); muster
    cuts rows instead when there are fewer blocks than parts, so no part is empty; equal=True cuts rows too."""
    assert [p.count() for p in md.range(10).repartition(2).split(3)] == [3, 3, 4]
    assert [p.count() for p in md.range(10).repartition(5).split(3, equal=True)] == [3, 3, 3]

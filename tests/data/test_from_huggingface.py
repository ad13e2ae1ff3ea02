"""``from_huggingface`` on real Hugging Face ``datasets`` objects made locally (nothing downloaded).
Before, it raised muster's unsupported-API error."""

from __future__ import annotations

import numpy as np
import pytest

import muster.data as md
from muster.exceptions import InvalidTypeError

datasets = pytest.importorskip("datasets", reason="datasets is in muster's test extra; pip install datasets")


@pytest.fixture(scope="module")
def hf():
    return datasets.Dataset.from_dict({"x": list(range(10)), "text": [f"s{i}" for i in range(10)],
                                       "vec": [[float(i)] * 3 for i in range(10)]})


def test_a_dataset_with_its_row_selection(hf):
    ds = md.from_huggingface(hf)
    assert ds.count() == 10 and ds.take(2) == [{"x": 0, "text": "s0", "vec": [0.0, 0.0, 0.0]},
                                              {"x": 1, "text": "s1", "vec": [1.0, 1.0, 1.0]}]
    # select / train_test_split keep an index mapping over the whole table: it applies, as in Ray
    assert [r["x"] for r in md.from_huggingface(hf.select([7, 2, 7])).take_all()] == [7, 2, 7]
    split = hf.train_test_split(test_size=0.3, seed=0)
    assert [r["x"] for r in md.from_huggingface(split["test"]).take_all()] == split["test"]["x"]
    assert md.from_huggingface(hf, override_num_blocks=3).num_blocks() == 3
    batch = md.from_huggingface(hf).map_batches(lambda b: {"y": b["x"] * 2}).take_batch(10)
    assert np.array_equal(batch["y"], np.arange(10) * 2)


def test_an_iterable_dataset_streams_each_pass(hf):
    it = hf.to_iterable_dataset(num_shards=2)
    ds = md.from_huggingface(it)
    assert ds.count() == 10 and sorted(r["x"] for r in ds.take_all()) == list(range(10))
    assert ds.filter(lambda r: r["x"] % 2 == 0).count() == 5  # a second pass reads it again


def test_a_dataset_dict_or_other_object_is_refused_naming_the_fix(hf):
    with pytest.raises(InvalidTypeError, match=r"DatasetDict holds the splits \['train', 'test'\].*ds\['train'\]"):
        md.from_huggingface(hf.train_test_split(test_size=0.5))
    with pytest.raises(InvalidTypeError, match=r"from_huggingface\(list\).*datasets.Dataset"):
        md.from_huggingface([1, 2])

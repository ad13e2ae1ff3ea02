"""Bad input to Core, Data and Serve calls: the error is muster's (a TypeError/ValueError too, as Ray's),
raised in the call the user made, and names the bad value and the fix in that call's words."""

from __future__ import annotations

import pandas as pd
import pytest

import muster
import muster.data as md
from muster import serve
from muster.core.local.slots import detect_total
from muster.exceptions import InvalidArgumentError, InvalidTypeError

from _shared import raise_naming


@muster.remote
def _one():
    return 1


class _Model:
    def __call__(self, request):
        return "ok"


def test_get_and_wait_refuse_a_bad_timeout_and_a_lone_ref():
    ref = _one.remote()
    with pytest.raises(InvalidArgumentError, match=r"muster.get\(timeout=-2\): use a number of seconds >= 0"):
        muster.get(ref, timeout=-2)
    with pytest.raises(InvalidArgumentError, match=r"muster.wait\(timeout=-1\): use a number of seconds >= 0"):
        muster.wait([ref], timeout=-1)
    with pytest.raises(InvalidTypeError, match=r"muster.get\(timeout='5'\)"):  # Ray's: a TypeError too
        muster.get(ref, timeout="5")
    with pytest.raises(InvalidTypeError, match=r"muster.wait\(timeout=True\)"):
        muster.wait([ref], timeout=True)
    with pytest.raises(InvalidTypeError, match=r"muster.wait\(5\): pass a list of ObjectRefs"):
        muster.wait(5)
    with pytest.raises(InvalidTypeError, match=r"muster.wait\(\[ref\]\) for a single one"):
        muster.wait(ref)
    assert muster.get(ref, timeout=-1) == 1  # as Ray's get: -1 is no timeout
    assert muster.get(ref, timeout=float("inf")) == 1  # no timeout either (an OverflowError before)
    assert muster.wait((ref,), timeout=0)[0] == [ref]


def test_resource_errors_name_the_argument_the_user_wrote():
    with pytest.raises(InvalidArgumentError, match=r"muster.init: num_cpus=-1: amounts must be numbers >= 0"):
        detect_total(-1, 0, None)  # what muster.init(num_cpus=-1) validates
    with pytest.raises(InvalidArgumentError, match=r"muster.init: num_gpus='1'"):
        detect_total(2, "1", None)
    with pytest.raises(InvalidArgumentError, match=r"deployment '_Model' ray_actor_options: num_cpus=-1"):
        serve.deployment(ray_actor_options={"num_cpus": -1})(_Model)
    with pytest.raises(InvalidArgumentError, match=r"ray_actor_options\['accel'\] = -2"):
        serve.deployment(ray_actor_options={"resources": {"accel": -2}})(_Model)


@pytest.mark.parametrize(
    "make, expected, shown",
    [
        (lambda: _one.options(memory=-1), InvalidArgumentError, ["_one: memory=-1; use a number of bytes >= 0"]),
        (lambda: _one.options(scheduling_strategy="spread"), InvalidArgumentError,
         ["scheduling_strategy='spread'; use 'DEFAULT', 'SPREAD'"]),
        (lambda: _one.options(resources={"x": -1}), InvalidArgumentError, ["_one: resources['x'] = -1"]),
        (lambda: md.from_pandas([1]), InvalidTypeError, ["from_pandas(): got a int (1)", "pandas DataFrame"]),
        (lambda: md.from_items(5), InvalidTypeError, ["from_items(5): pass a list of rows"]),
        (lambda: md.from_items({"x": 1}), InvalidTypeError, ["from_items({'x': 1}): pass a list of rows"]),
        (lambda: md.read_csv(5), InvalidTypeError, ["read_csv(paths=5)"]),
        (lambda: md.range(4).split(0), InvalidArgumentError, ["split(n=0): use a positive integer."]),
        (lambda: md.range(4).streaming_split(None), InvalidArgumentError, ["streaming_split(n=None)"]),
        (lambda: md.range(4).take(-1), InvalidArgumentError, ["take(-1): use an integer >= 0"]),
        (lambda: md.range(4).add_column("y", 5), InvalidTypeError, ["add_column(col='y', fn=5)"]),
        (lambda: md.range(4).write_parquet(5), InvalidTypeError, ["write_parquet(path=5)"]),
        (lambda: next(iter(md.range(4).iter_torch_batches(dtypes="float32"))), InvalidTypeError,
         ["iter_torch_batches(dtypes='float32')", "torch.float32"]),
        (lambda: next(iter(md.range(4).iter_torch_batches(device="gpu"))), InvalidArgumentError,
         ["iter_torch_batches(device='gpu')", "'cuda'"]),
        (lambda: serve.deployment(num_replicas=-1)(_Model), InvalidArgumentError,
         ["num_replicas=-1: use an integer >= 1, or 'auto'"]),
        (lambda: serve.deployment(num_replicas="autoo")(_Model), InvalidArgumentError,
         ["num_replicas='autoo'", "'auto'"]),
        (lambda: serve.batch(4), InvalidTypeError, ["@serve.batch(4)", "@serve.batch(max_batch_size=4)"]),
    ],
)
def test_core_data_and_serve_bad_input(make, expected, shown):
    raise_naming(make, expected, shown)


def test_good_data_inputs_still_pass(tmp_path):
    assert md.from_pandas(pd.DataFrame({"x": [1, 2]})).count() == 2
    assert md.from_items(({"x": 1},)).count() == md.from_items(range(1)).count() == 1
    assert len(md.range(4).take(2)) == 2
    md.range(4).write_parquet(tmp_path)  # a pathlib.Path names the folder too
    assert md.read_parquet([str(tmp_path)]).count() == 4

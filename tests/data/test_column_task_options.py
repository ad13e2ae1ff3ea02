"""Ray's task options on the column operations (``add_column``, ``drop_columns``, ``select_columns``,
``rename_columns``, ``with_column``): accepted with ``map_batches``' meaning, bad values refused."""

from __future__ import annotations

import pytest

import muster.data as md
from muster.core import api
from muster.data.expressions import col
from muster.exceptions import InvalidArgumentError, ResourcesUnavailableError

OPS = {
    "add_column": lambda ds, **o: ds.add_column("y", lambda d: d["id"] * 2, **o),
    "drop_columns": lambda ds, **o: ds.drop_columns(["z"], **o),
    "select_columns": lambda ds, **o: ds.select_columns(["id"], **o),
    "rename_columns": lambda ds, **o: ds.rename_columns({"z": "w"}, **o),
    "with_column": lambda ds, **o: ds.with_column("y", col("id") * 2, **o),
}
ROWS = {
    "add_column": [{"id": i, "z": i, "y": 2 * i} for i in range(6)],
    "drop_columns": [{"id": i} for i in range(6)],
    "select_columns": [{"id": i} for i in range(6)],
    "rename_columns": [{"id": i, "w": i} for i in range(6)],
    "with_column": [{"id": i, "z": i, "y": 2 * i} for i in range(6)],
}


def _base():
    return md.range(6, override_num_blocks=3).map(lambda r: {"id": r["id"], "z": r["id"]})


@pytest.mark.parametrize("name", list(OPS))
def test_task_options_reach_the_operator_and_rows_are_right(name):
    options = {"compute": md.TaskPoolStrategy(size=2), "num_cpus": 1, "num_gpus": 0, "memory": 10**6,
               "runtime_env": {}}
    ds = OPS[name](_base(), **options)
    step = ds._node.op.ray.steps[-1][2]  # what the ray.data call gets
    assert step["concurrency"] == 2 and step["num_cpus"] == 1 and step["memory"] == 10**6, step
    assert ds._node.op.fn.concurrency == 2 and ds._node.op.fn.num_cpus == 1  # what the engine holds per task
    assert sorted(ds.take_all(), key=lambda r: r["id"]) == ROWS[name]


@pytest.mark.parametrize("name", list(OPS))
def test_num_cpus_beyond_the_machine_fails_at_once_naming_the_operation(name):
    asked = int(api.get_runtime().resources()["CPU"]) * 16
    with pytest.raises(ResourcesUnavailableError, match=f"{name}\\(.*num_cpus={asked}"):
        OPS[name](_base(), num_cpus=asked).take_all()


@pytest.mark.parametrize("bad", [{"num_cpus": -1}, {"num_gpus": "x"}, {"memory": -5}, {"concurrency": 0},
                                 {"compute": "tasks"}, {"compute": md.TaskPoolStrategy(size=1), "concurrency": 1}])
def test_bad_task_options_are_refused_naming_the_value(bad):
    for name, make in OPS.items():
        with pytest.raises((InvalidArgumentError, TypeError), match=name):
            make(_base(), **bad)

"""``Dataset.stats()`` reads as Ray 2.60's: one block per operator (``Operator 1 ReadRange->Map(<lambda>): 5 tasks
executed, 5 blocks produced in 0.06s``), Ray's bullet lines, then ``Dataset throughput``; "" before a run.

``RAY_RANGE_MAP_BATCHES`` is what Ray 2.60 printed (``ray.init(address="local", num_cpus=2)``) for
``ray.data.range(100, override_num_blocks=5).map_batches(lambda b: {"id": b["id"] * 2})`` after ``take_all()``,
without its iterator breakdown (muster does not measure one).
"""

from __future__ import annotations

import re
import time

import pyarrow as pa
import pyarrow.parquet as pq

import muster.data as md

RAY_RANGE_MAP_BATCHES = """\
Operator 1 ReadRange->MapBatches(<lambda>): 5 tasks executed, 5 blocks produced in 0.76s
* Remote wall time: 2.4ms min, 72.51ms max, 20.42ms mean, 102.1ms total
* Remote cpu time: 1.76ms min, 4.9ms max, 2.65ms mean, 13.27ms total
* Block transform time: 660.95us min, 4.32ms max, 1.46ms mean, 7.32ms total
* Output num rows per block: 20 min, 20 max, 20 mean, 100 total
* Output size bytes per block: 160 min, 160 max, 160 mean, 800 total
* Output rows per task: 20 min, 20 max, 20 mean, 5 tasks used
* Tasks per node: 5 min, 5 max, 5 mean; 1 nodes used
* Operator throughput:
\t* Total input num rows: 0 rows
\t* Total output num rows: 100 rows
\t* Ray Data throughput: 130.7274446964474 rows/s
\t* Estimated single task throughput: 979.4629440937555 rows/s

Dataset throughput:
\t* Ray Data throughput: 130.7274446964474 rows/s
"""
_DURATION = r"[\d.]+(?:s|ms|us)"
_HEADER = re.compile(r"^Operator (\d+) (.+): (\d+) tasks executed, (\d+) blocks produced in ([\d.]+)s$")


def _skeleton(text: str) -> list[str]:
    """The lines with every duration ``T`` and every other number ``N``: the layout and wording only."""
    text = re.sub(_DURATION, "T", text)
    return re.sub(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", "N", text).splitlines()


def _rays_part(text: str) -> str:
    """``text`` up to muster's own section (what Ray prints too)."""
    return text.split("\nExecution (muster):\n", 1)[0]


def _seconds(figure: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(s|ms|us)", figure).groups()
    return float(number) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def _operators(text: str) -> dict[str, dict[str, str]]:
    """Each operator block of ``text``, by name: its header's figures and its bullet lines by label."""
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in _rays_part(text).splitlines():
        head = _HEADER.match(line)
        if head:
            number, name, tasks, blocks, took = head.groups()
            current = out[name] = {"number": number, "tasks": tasks, "blocks": blocks, "took": took}
        elif current is not None and line.startswith(("* ", "\t* ")) and ": " in line:
            label, value = line.strip()[2:].split(": ", 1)
            current[label] = value
        elif not line:
            current = None
    return out


def test_stats_follow_rays_layout_and_wording():
    """Before: "(not executed yet)", then "Execution: ... wall, peak ... MiB" and one line per operator. Now
    Ray's text: "" before a run, an ``Operator N`` block per fused stage with Ray's bullet lines, each figure
    muster's own, then ``Dataset throughput``; muster's extras after."""
    ds = md.range(100, override_num_blocks=5).map_batches(lambda b: {"id": b["id"] * 2})
    assert ds.stats() == ""  # as Ray: nothing ran
    assert len(ds.take_all()) == 100
    text = ds.stats()
    ray_lines = [ln for ln in _skeleton(RAY_RANGE_MAP_BATCHES) if not ln.startswith("* Block transform time")]
    assert _skeleton(_rays_part(text)) == ray_lines, text  # Ray's lines, less the one muster cannot measure
    op = _operators(text)["ReadRange->MapBatches(<lambda>)"]
    assert (op["number"], op["tasks"], op["blocks"]) == ("1", "5", "5")
    assert op["Output num rows per block"] == "20 min, 20 max, 20 mean, 100 total"
    assert op["Output size bytes per block"] == "160 min, 160 max, 160 mean, 800 total"  # Ray's figures too
    assert op["Output rows per task"] == "20 min, 20 max, 20 mean, 5 tasks used"
    assert op["Total input num rows"] == "0 rows" and op["Total output num rows"] == "100 rows"
    wall = [_seconds(v) for v in re.findall(_DURATION, op["Remote wall time"])]
    low, high, mean, total = wall  # as Ray rounds them: 2 decimals of s, ms or us
    assert low <= mean <= high and abs(total - 5 * mean) <= 0.01 * total + 2e-5, wall
    # muster's own figures follow, each operator of the fused stage on its own
    extra = text.split("\nExecution (muster):\n", 1)[1]
    assert "* Peak bytes in flight: " in extra and "\t* ReadRange: 100 rows in 5 blocks" in extra
    assert "\t* MapBatches(<lambda>): 100 rows in 5 blocks" in extra


def test_each_stage_is_an_operator_numbered_as_it_ran(tmp_path):
    """A read with the transforms fused into it, an all-to-all operator, the transforms after it: each an
    ``Operator N`` block as Ray prints its operators, with the rows each took in and made."""
    pq.write_table(pa.table({"x": list(range(1000)), "y": [i % 7 for i in range(1000)]}), tmp_path / "a.parquet")
    ds = md.read_parquet(str(tmp_path)).filter(lambda r: r["y"] > 2)
    assert len(ds.take_all()) == 571
    ops = _operators(ds.stats())
    assert list(ops) == ["ReadParquet->Filter(<lambda>)"] and ops["ReadParquet->Filter(<lambda>)"]["tasks"] == "1"
    assert ops["ReadParquet->Filter(<lambda>)"]["Total output num rows"] == "571 rows"
    grouped = md.range(100, override_num_blocks=5).groupby("id").count()
    assert len(grouped.take_all()) == 100
    ops = _operators(grouped.stats())
    assert [(name, op["number"]) for name, op in ops.items()] == [("ReadRange", "1"), ("Aggregate", "2")]
    assert ops["Aggregate"]["Total input num rows"] == "100 rows" and ops["Aggregate"]["tasks"] == "1"
    shuffled = md.range(100, override_num_blocks=5).random_shuffle(seed=1).map_batches(lambda b: b)
    assert len(shuffled.take_all()) == 100
    ops = _operators(shuffled.stats())
    assert list(ops) == ["ReadRange", "RandomShuffle", "MapBatches(<lambda>)"], shuffled.stats()
    assert ops["MapBatches(<lambda>)"]["Total input num rows"] == "100 rows"


def test_a_materialized_datasets_stats_come_first_as_rays_do():
    """As Ray: a materialized dataset shows the run that made it; a dataset made from it shows that run until it
    runs itself, then that run's operators numbered after it."""
    made = md.range(100, override_num_blocks=5).map(lambda r: r).materialize()
    assert list(_operators(made.stats())) == ["ReadRange->Map(<lambda>)"]
    then = made.map_batches(lambda b: b).filter(lambda r: r["id"] % 2 == 0)
    assert then.stats() == made.stats()
    assert len(then.take_all()) == 50
    ops = _operators(then.stats())
    assert [(name, op["number"]) for name, op in ops.items()] == [
        ("ReadRange->Map(<lambda>)", "1"), ("FromArrow->MapBatches(<lambda>)->Filter(<lambda>)", "2")]
    assert ops["FromArrow->MapBatches(<lambda>)->Filter(<lambda>)"]["Total output num rows"] == "50 rows"
    assert then.stats().count("Dataset throughput:") == 1


def test_remote_cpu_time_is_measured_apart_from_wall_time(threads_only):
    """A task that sleeps holds the wall clock, not a CPU: the two figures are measured each on its own."""
    ds = md.range(4, override_num_blocks=2).map_batches(lambda b: time.sleep(0.1) or b)
    ds.take_all()
    op = _operators(ds.stats())["ReadRange->MapBatches(<lambda>)"]
    wall = [_seconds(v) for v in re.findall(_DURATION, op["Remote wall time"])]
    cpu = [_seconds(v) for v in re.findall(_DURATION, op["Remote cpu time"])]
    assert wall[0] >= 0.1 and cpu[3] < wall[3] / 2, (wall, cpu)

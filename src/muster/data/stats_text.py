"""``Dataset.stats()``'s text: Ray 2.60's layout and wording, with muster's own measurements.

As Ray prints it (``DatasetStatsSummary.to_string``), one block per operator, numbered from 1 in the order
they ran, a ``materialize()``'s first (``Operator 1 ReadRange->Map(<lambda>): 5 tasks executed, 5 blocks
produced in 0.06s``), separated by a blank line, each with the lines Ray prints that muster measures:

* ``* Remote wall time`` / ``* Remote cpu time``: min, max, mean and total over the operator's tasks (the
  seconds each task ran, in a thread here or in a pooled worker or an actor; CPU: that thread's);
* ``* Output num rows per block`` / ``* Output size bytes per block``: over the blocks it made (bytes in
  memory, Arrow's);
* ``* Output rows per task`` and ``* Tasks per node`` (one node: muster's engine runs a pass on one machine);
* ``* Operator throughput``: its input and output rows, its rows per second from its first task's start
  to its last one's end, and per second of its tasks' summed wall time (Ray's "estimated single task");

then ``Dataset throughput`` (the rows the pass delivered per second, first task's start to last task's
end, over every operator shown).  Ray's "Block transform time" (time inside Ray's map transformer) and its
iterator breakdown are not printed: muster does not measure those.  An operator here is a stage of
muster's execution, named as ``explain()`` names it (a read with the transforms fused into its tasks, the
transforms after an all-to-all operator, an actor pool, an all-to-all operator as one task).

What Ray lacks follows, under ``Execution (muster):``: the pass's wall time, the peak bytes in flight
against ``DataContext.max_bytes_in_flight``, and each operator on its own, fused ones too (rows, blocks,
busy seconds, rows/s, the actors of a pool, the time blocked on backpressure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from muster.data.stats import OpStats, StageStats, Stats

#: Ray's label for a throughput figure: kept, so that text written for Ray's ``stats()`` reads muster's
THROUGHPUT = "Ray Data throughput"


def fmt(seconds: float) -> str:
    """A duration as Ray's ``stats`` prints one: ``1.23s``, ``12.5ms``, ``310.0us``."""
    if seconds > 1:
        return f"{round(seconds, 2)}s"
    if seconds > 0.001:
        return f"{round(seconds * 1000, 2)}ms"
    return f"{round(seconds * 1000 * 1000, 2)}us"


def _lineage(stats: "Stats") -> list["Stats"]:
    chain = []
    at: Stats | None = stats
    while at is not None:
        chain.append(at)
        at = at.parent
    return chain[::-1]


def render(stats: "Stats") -> str:
    """The text of ``Dataset.stats()`` for the execution ``stats`` counted (see the module docstring)."""
    stages = [stage for s in _lineage(stats) for stage in s.copy_stages()]
    ops = stats.copy_ops()
    if not stages and not ops:
        return ""
    out = "\n".join(f"Operator {n} {name}: {_stage(s)}" for n, (name, s) in enumerate(stages, 1))
    spans = [s.span for _, s in stages if s.span is not None]
    wall = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
    if stats.rows_delivered and wall > 0:
        out += f"\nDataset throughput:\n\t* {THROUGHPUT}: {stats.rows_delivered / wall} rows/s\n"
    return out + ("\n" if out else "") + _own(stats, ops)


def _spread(values: Sequence[float]) -> tuple[float, float, float, float]:
    return min(values), max(values), sum(values) / len(values), sum(values)


def _times(label: str, values: Sequence[float]) -> str:
    low, high, mean, total = _spread(values)
    return f"* {label}: {fmt(low)} min, {fmt(high)} max, {fmt(mean)} mean, {fmt(total)} total\n"


def _counts(label: str, values: Sequence[int], last: str = "total") -> str:
    low, high, mean, total = _spread(values)
    end = f"{int(total)} total" if last == "total" else f"{len(values)} {last}"
    return f"* {label}: {int(low)} min, {int(high)} max, {int(mean)} mean, {end}\n"


def _stage(s: "StageStats") -> str:
    """One operator's block after its ``Operator N name: `` (as Ray's ``OperatorStatsSummary.__str__``)."""
    if not s.times:
        return "\n"
    start, end = s.span or (0.0, 0.0)
    took = max(end - start, 0.0)
    rounded = round(took, 2)
    out = (f"{len(s.times)} tasks executed, {len(s.block_rows)} blocks produced in "
           f"{rounded if rounded > 0 else 0}s\n")
    out += _times("Remote wall time", [t.wall_s for t in s.times])
    out += _times("Remote cpu time", [t.cpu_s for t in s.times])
    if s.block_rows:
        out += _counts("Output num rows per block", s.block_rows)
        out += _counts("Output size bytes per block", s.block_bytes)
    out += _counts("Output rows per task", s.task_rows, last="tasks used")
    n = len(s.times)
    out += f"* Tasks per node: {n} min, {n} max, {n} mean; 1 nodes used\n"
    busy = sum(t.wall_s for t in s.times)
    if s.rows_out and took > 0 and busy > 0:
        out += ("* Operator throughput:\n"
                f"\t* Total input num rows: {s.rows_in} rows\n"
                f"\t* Total output num rows: {s.rows_out} rows\n"
                f"\t* {THROUGHPUT}: {s.rows_out / took} rows/s\n"
                f"\t* Estimated single task throughput: {s.rows_out / busy} rows/s\n")
    return out


def _own(stats: "Stats", ops: list[tuple[str, "OpStats"]]) -> str:
    """muster's figures that Ray's text lacks: the pass's wall time and peak bytes in flight, and every
    operator on its own (those fused into one task too)."""
    out = ("Execution (muster):\n"
           f"* Wall time: {fmt(stats.elapsed())}\n"
           f"* Peak bytes in flight: {stats.peak_bytes_in_flight / 2**20:.1f} MiB "
           f"(budget {stats.budget / 2**20:.1f} MiB)\n")
    if ops:
        out += "* Per operator (each transform of a fused operator on its own):\n"
    for name, o in ops:
        rate = f" ({o.rows_out / o.busy_s:,.0f} rows/s)" if o.busy_s > 0 else ""
        actors = f", {o.actors} actors" if o.actors else ""
        blocked = f", {fmt(o.blocked_s)} blocked on backpressure" if o.blocked_s >= 0.001 else ""
        out += f"\t* {name}: {o.rows_out} rows in {o.blocks} blocks, {fmt(o.busy_s)} busy{rate}{actors}{blocked}\n"
    return out

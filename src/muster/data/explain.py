"""``Dataset.explain()``: muster's own plan for a dataset, in two parts, without running any of it.

* **Logical Plan**: the operators as the dataset's methods recorded them, last first, each input one level
  in under ``+-`` (``Transform[MapBatches(f)]``, ``AllToAll[RandomShuffle]``, ``Read[ReadParquet]``...; a
  filter taken into a read's scan is named on the read).
* **Execution**: the stages ``execution`` runs for it, walked as it walks the plan: the transforms after a
  read fused into each read task (``ReadTasks[ReadRange->MapBatches(f)] (3 tasks)``), those after an
  all-to-all operator, a limit or a union in one task per block, a callable class with ``concurrency=`` in
  an actor pool of its own, an all-to-all operator gathering its input first, a join both of its inputs; each
  with the task options its transforms were given (``MapBatches(f): num_cpus=2``).

Ray's ``explain`` prints its logical and physical plans; these are muster's (on the Ray engine,
``Dataset.explain`` prints Ray's own instead, since Ray runs the plan there).
"""

from __future__ import annotations

from muster.data.plan import AllToAll, Join, Limit, MapBatches, Node, Read, Transform, Union, Zip

_INDENT = "   "


def explain_text(node: Node) -> str:
    """The two plans of ``node``'s dataset (see the module's docstring)."""
    logical: list[str] = []
    _tree(node, 0, logical)
    execution: list[str] = []
    _stage(node, 0, execution)
    return "\n".join(["-------- Logical Plan --------", *logical, "",
                      "-------- Execution --------", *execution])


def _line(depth: int, text: str) -> str:
    return text if depth == 0 else f"{_INDENT * (depth - 1)}+- {text}"


def _scan_filters(read: Read) -> str:
    return f", its scan filtered by {' & '.join(read.filters)}" if read.filters else ""


def _options(op: Transform) -> list[str]:
    """A transform's task options as given (``concurrency=2``, ``num_cpus=1``), and an explicit batch size's
    bundling (small blocks are combined into its batches)."""
    fn = op.fn
    if not isinstance(fn, MapBatches):
        return []
    bundled = [f"batches of {fn.bundle_rows} rows spanning small blocks"] if fn.bundle_rows else []
    return fn.options() + bundled


def _tree(node: Node, depth: int, lines: list[str]) -> None:
    pushed = _scan_filters(node.op)[2:] if isinstance(node.op, Read) else ""
    lines.append(_line(depth, f"{type(node.op).__name__}[{node.op.name}]" + (f" ({pushed})" if pushed else "")))
    for child in node.inputs:
        _tree(child, depth + 1, lines)


def _stage(node: Node, depth: int, lines: list[str]) -> None:
    """The stages that make ``node``'s blocks, as ``execution._stream`` runs them."""
    chain: list[str] = []
    notes: list[str] = []  # the fused transforms' task options, as given
    while isinstance(node.op, Transform) and not node.op.on_actors:
        chain.append(node.op.name)
        options = _options(node.op)
        if options:
            notes.insert(0, f"{node.op.name}: {', '.join(options)}")
        node = node.inputs[0]
    chain.reverse()
    said = "".join(f"; {note}" for note in notes)
    op = node.op
    if isinstance(op, Read) or (isinstance(op, AllToAll) and op.reorders_reads is not None
                                and isinstance(node.inputs[0].op, Read)):
        read = op if isinstance(op, Read) else node.inputs[0].op
        assert isinstance(read, Read)
        order = f", in the order {op.name} draws each pass" if isinstance(op, AllToAll) else ""
        fused = ", the transforms fused into each" if chain else ""
        tasks = f"{len(read.tasks)} task{'' if len(read.tasks) == 1 else 's'}"
        lines.append(_line(depth, f"ReadTasks[{'->'.join([read.name, *chain])}] ({tasks}{_scan_filters(read)}"
                                  f"{fused}{order}{said})"))
        return
    if chain:
        lines.append(_line(depth, f"BlockTasks[{'->'.join(chain)}] (one task per input block{said})"))
        depth += 1
    if isinstance(op, Transform):
        assert isinstance(op.fn, MapBatches)
        lines.append(_line(depth, f"ActorPool[{op.name}] ({', '.join(_options(op))})"))
    elif isinstance(op, AllToAll):
        lines.append(_line(depth, f"AllToAll[{op.name}] (gathers every input block first)"))
    elif isinstance(op, Join):
        lines.append(_line(depth, f"Join[{op.name}] (gathers both inputs first, then joins them)"))
    elif isinstance(op, Zip):
        lines.append(_line(depth, f"Zip[{op.name}] (gathers every input first, then puts their columns side by side)"))
    elif isinstance(op, Limit):
        lines.append(_line(depth, f"Limit[{op.name}] (stops its input once {op.n} rows have come)"))
    elif isinstance(op, Union):
        how = "interleaved by weight" if op.weights is not None else "one input after another"
        lines.append(_line(depth, f"Union[{op.name}] ({how})"))
    for child in node.inputs:
        _stage(child, depth + 1, lines)

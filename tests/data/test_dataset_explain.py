"""``Dataset.explain()`` prints muster's own plan (its logical operators, then the stages that run them) and
runs nothing of it."""

from __future__ import annotations

import muster.data as md
from muster.data.expressions import col


def never(batch):
    raise AssertionError("explain ran the plan")


class Model:
    def __call__(self, batch):
        return batch


def test_explain_prints_the_operators_and_which_transforms_fuse_into_which_tasks(capsys):
    ds = (md.range(10, override_num_blocks=2).map_batches(never).filter(expr=col("id") > 3)
          .random_shuffle(seed=1).with_column("z", col("id") * 2).limit(3)
          .union(md.range(3)).map_batches(Model, concurrency=2).map(never))
    assert ds.explain() is None
    assert capsys.readouterr().out == """\
-------- Logical Plan --------
Transform[Map(never)]
+- Transform[MapBatches(Model)]
   +- Union[Union]
      +- Limit[limit=3]
         +- Transform[Project]
            +- AllToAll[RandomShuffle]
               +- Transform[Filter(col('id') > 3)]
                  +- Transform[MapBatches(never)]
                     +- Read[ReadRange]
      +- Read[ReadRange]

-------- Execution --------
BlockTasks[Map(never)] (one task per input block)
+- ActorPool[MapBatches(Model)] (concurrency=2)
   +- Union[Union] (one input after another)
      +- Limit[limit=3] (stops its input once 3 rows have come)
         +- BlockTasks[Project] (one task per input block)
            +- AllToAll[RandomShuffle] (gathers every input block first)
               +- ReadTasks[ReadRange->MapBatches(never)->Filter(col('id') > 3)] (2 tasks, the transforms fused \
into each)
      +- ReadTasks[ReadRange] (1 task)
"""


def test_explain_of_a_read_reordered_per_pass_and_of_a_bare_read(capsys, tmp_path):
    md.range(4, override_num_blocks=4).write_parquet(str(tmp_path))
    md.read_parquet(str(tmp_path)).randomize_block_order(seed=1).map(never).explain()
    md.read_parquet(str(tmp_path)).explain()
    n = len(md.read_parquet(str(tmp_path))._node.op.tasks)  # small files share a read task
    tasks = f"{n} task{'' if n == 1 else 's'}"
    assert capsys.readouterr().out == f"""\
-------- Logical Plan --------
Transform[Map(never)]
+- AllToAll[RandomizeBlockOrder]
   +- Read[ReadParquet]

-------- Execution --------
ReadTasks[ReadParquet->Map(never)] ({tasks}, the transforms fused into each, in the order RandomizeBlockOrder \
draws each pass)
-------- Logical Plan --------
Read[ReadParquet]

-------- Execution --------
ReadTasks[ReadParquet] ({tasks})
"""


def test_explain_names_each_transforms_task_options(capsys):
    """explain() showed no task options: num_cpus, concurrency and an explicit batch size's bundling were
    invisible in the plan."""
    (md.range(10, override_num_blocks=2).map_batches(never, num_cpus=1, batch_size=4).random_shuffle()
     .map_batches(never, concurrency=2).map_batches(Model, concurrency=2, num_cpus=0.5).explain())
    execution = capsys.readouterr().out.split("-------- Execution --------\n")[1]
    assert execution == """\
ActorPool[MapBatches(Model)] (concurrency=2, num_cpus=0.5)
+- BlockTasks[MapBatches(never)] (one task per input block; MapBatches(never): concurrency=2)
   +- AllToAll[RandomShuffle] (gathers every input block first)
      +- ReadTasks[ReadRange->MapBatches(never)] (2 tasks, the transforms fused into each; MapBatches(never): \
num_cpus=1, batches of 4 rows spanning small blocks)
"""

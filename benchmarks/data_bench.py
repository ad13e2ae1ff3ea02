"""muster.data vs raw pyarrow (the limit) vs Ray Data, side by side, interleaved.

Scenarios (rows/s unless noted; each repeat runs every contender once, in turn):

1. ``read``: parquet folder -> ``iter_batches(batch_size=4096)`` (numpy dicts).
2. ``map_torch``: parquet -> ``map_batches(x * 2)`` -> ``iter_torch_batches``.
3. ``shuffle``: one per-epoch ``random_shuffle`` pass over N in-memory rows
   (muster also reports its unshuffled pass over the same data).  ``muster``
   is a training loop's iterator, whose next order is drawn in the background
   once an epoch's rows are gathered; ``muster, order inline`` is a fresh
   dataset each time, so the order is drawn inside the timed pass.
4. ``small_files``: 2,000 parquet files of 500 rows, read end to end (seconds).
5. ``first_batch``: from ``read_parquet(...)`` to the first batch in hand (seconds).
6. ``rss``: peak RSS growth of a fresh process streaming a dataset 5x
   ``DataContext.max_bytes_in_flight`` (MiB; muster and pyarrow only -- Ray
   keeps blocks in its object store, outside the driver's RSS).
7. ``sql``: ``read_sql`` of a sqlite3 table of ``--sql-rows`` rows (an int, a
   float and a text column) -> ``iter_batches``; the limit is sqlite3's cursor
   into one ``pyarrow.Table``.  ``--only sql`` runs this scenario alone.

Run::

    python benchmarks/data_bench.py                  # ~5-10 min on 2 loaded cores
    python benchmarks/data_bench.py --repeats 3 --rows 2000000 --shuffle-rows 2000000 --no-ray

Prints a table of medians with [min-max] and the ratios quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

BATCH = 4096


def make_parquet(folder: str, rows: int, files: int) -> None:
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    per = rows // files
    for i in range(files):
        t = pa.table({"id": np.arange(i * per, (i + 1) * per, dtype=np.int64),
                      "x": rng.random(per, dtype=np.float32), "y": rng.random(per)})
        pq.write_table(t, os.path.join(folder, f"part-{i:05d}.parquet"), row_group_size=256 * 1024)


# -- contenders ------------------------------------------------------------------------
def raw_read(path: str) -> int:
    n = 0
    for rb in pads.dataset(path, format="parquet").to_batches(batch_size=BATCH):
        cols = {name: rb.column(i).to_numpy() for i, name in enumerate(rb.schema.names)}
        n += len(cols["id"])
    return n


def muster_read(path: str) -> int:
    import muster.data as md

    return sum(len(b["id"]) for b in md.read_parquet(path).iter_batches(batch_size=BATCH))


def ray_read(path: str) -> int:
    import ray.data

    return sum(len(b["id"]) for b in ray.data.read_parquet(path).iter_batches(batch_size=BATCH))


def double(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"id": batch["id"], "x": batch["x"] * 2, "y": batch["y"] * 2}


def raw_map_torch(path: str) -> int:
    import torch

    n = 0
    for rb in pads.dataset(path, format="parquet").to_batches(batch_size=BATCH):
        batch = double({name: rb.column(i).to_numpy() for i, name in enumerate(rb.schema.names)})
        n += len({k: torch.as_tensor(v) for k, v in batch.items()}["id"])
    return n


def muster_map_torch(path: str) -> int:
    import muster.data as md

    ds = md.read_parquet(path).map_batches(double, batch_size=None)
    return sum(len(b["id"]) for b in ds.iter_torch_batches(batch_size=BATCH))


def ray_map_torch(path: str) -> int:
    import ray.data

    ds = ray.data.read_parquet(path).map_batches(double, batch_size=None)
    return sum(len(b["id"]) for b in ds.iter_torch_batches(batch_size=BATCH))


def shuffle_contenders(table: pa.Table, with_ray: bool) -> dict[str, Callable[[], int]]:
    import muster.data as md

    mds = md.from_arrow(table)
    shuffled = mds.random_shuffle(seed=0).iterator()

    def pipelined() -> float:
        """One epoch of a training loop's shuffled iterator: this epoch's order was drawn in the
        background after the last epoch's gather; interleave() lets that draw finish before the
        next contender runs, so that it slows nobody's timing."""
        t = time.perf_counter()
        sum(len(b["id"]) for b in shuffled.iter_batches(batch_size=BATCH))
        return time.perf_counter() - t

    seeds = iter(range(1, 1_000_000))
    out: dict[str, Callable[[], Any]] = {
        "pyarrow": lambda: _count_batches(table.take(pa.array(np.random.default_rng().permutation(table.num_rows)))),
        "muster": pipelined,
        "muster, order inline": lambda: sum(
            len(b["id"]) for b in mds.random_shuffle(seed=next(seeds)).iter_batches(batch_size=BATCH)),
        "muster unshuffled": lambda: sum(len(b["id"]) for b in mds.iter_batches(batch_size=BATCH)),
    }
    if with_ray:
        import ray.data

        rds = ray.data.from_arrow(table)
        out["ray"] = lambda: sum(len(b["id"]) for b in rds.random_shuffle().iter_batches(batch_size=BATCH))
    return out


def _count_batches(table: pa.Table) -> int:
    n = 0
    for rb in table.to_batches(max_chunksize=BATCH):
        n += len(rb.column(0).to_numpy())
    return n


def first_batch(make: Callable[[], Any]) -> Callable[[], float]:
    def run() -> float:
        t = time.perf_counter()
        it = iter(make())
        next(it)
        took = time.perf_counter() - t
        close = getattr(it, "close", None)
        if close is not None:
            close()  # stop the rest of the pass: the next contender gets the machine
        return took

    return run


# -- the RSS scenario runs in fresh processes -------------------------------------------
def rss_child(kind: str, path: str, budget: int) -> None:
    import psutil

    import muster.data as md

    md.DataContext.get_current().max_bytes_in_flight = budget
    proc = psutil.Process()
    base = peak = proc.memory_info().rss
    done = threading.Event()

    def sample() -> None:  # ru_maxrss would carry the parent's peak across exec
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if kind == "muster":
        rows = sum(len(b["id"]) for b in md.read_parquet(path).iter_batches(batch_size=BATCH))
    else:
        rows = raw_read(path)
    done.set()
    sampler.join()
    print(f"{rows} {max(0, peak - base)}")


def rss_run(kind: str, path: str, budget: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--rss-child", kind, "--path", path, "--budget", str(budget)],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return int(out.stdout.split()[1]) / 2**20


def make_sqlite(path: str, rows: int) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, x REAL, name TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", ((i, i * 0.5, f"row{i}") for i in range(rows)))


def raw_sql(path: str) -> int:
    import sqlite3

    conn = sqlite3.connect(path)
    cur = conn.execute("SELECT * FROM t")
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    conn.close()
    table = pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)})
    return table.num_rows


def sql_read(module: Any, path: str) -> int:
    import sqlite3

    ds = module.read_sql("SELECT * FROM t", lambda: sqlite3.connect(path))
    return sum(len(b["id"]) for b in ds.iter_batches(batch_size=BATCH))


# -- harness ------------------------------------------------------------------------------
def interleave(contenders: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():
        fn()  # warm up: imports, caches, Ray's worker pool
        _join_background_draws()
    for _ in range(repeats):
        for name, fn in contenders.items():
            t = time.perf_counter()
            value = fn()
            times[name].append(value if isinstance(value, float) else time.perf_counter() - t)
            _join_background_draws()  # a shuffle's next order, drawn after its pass: not in the next timing
    return times


def _join_background_draws() -> None:
    for thread in threading.enumerate():
        if thread.name == "muster-data-next-shuffle":
            thread.join()


def fmt(values: list[float], rows: int | None) -> str:
    if rows:
        rates = [rows / v for v in values]
        return f"{statistics.median(rates) / 1e6:7.2f} Mrows/s [{min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}]"
    return f"{statistics.median(values):7.3f} [{min(values):.3f}-{max(values):.3f}]"


def report(title: str, times: dict[str, list[float]], rows: int | None, unit: str = "") -> dict[str, float]:
    print(f"\n{title}{unit}")
    for name, values in times.items():
        print(f"  {name:20s} {fmt(values, rows)}")
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--shuffle-rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--sql-rows", type=int, default=500_000)
    ap.add_argument("--only", choices=["sql"], help="run one scenario alone")
    ap.add_argument("--rss-child")
    ap.add_argument("--path")
    ap.add_argument("--budget", type=int, default=32 * 2**20)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.path, args.budget)
        return
    with_ray = not args.no_ray
    if with_ray:
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
    if args.only == "sql":
        with tempfile.TemporaryDirectory() as tmp:
            sql_scenario(tmp, args, with_ray)
        return
    with tempfile.TemporaryDirectory() as tmp:
        big, small = os.path.join(tmp, "big"), os.path.join(tmp, "small")
        make_parquet(big, args.rows, 16)
        make_parquet(small, 2000 * 500, 2000)
        ratios: dict[str, float] = {}

        read = {"pyarrow": lambda: raw_read(big), "muster": lambda: muster_read(big)}
        mapt = {"pyarrow": lambda: raw_map_torch(big), "muster": lambda: muster_map_torch(big)}
        files = {"pyarrow": lambda: raw_read(small), "muster": lambda: muster_read(small)}
        import muster.data as md

        first = {"pyarrow": first_batch(lambda: pads.dataset(big, format="parquet").to_batches(batch_size=BATCH)),
                 "muster": first_batch(lambda: md.read_parquet(big).iter_batches(batch_size=BATCH))}
        if with_ray:
            import ray.data

            read["ray"] = lambda: ray_read(big)
            mapt["ray"] = lambda: ray_map_torch(big)
            files["ray"] = lambda: ray_read(small)
            first["ray"] = first_batch(lambda: ray.data.read_parquet(big).iter_batches(batch_size=BATCH))
        m = report("(1) parquet read -> iter_batches", interleave(read, args.repeats), args.rows)
        ratios["read vs pyarrow"] = m["pyarrow"] / m["muster"]
        if with_ray:
            ratios["read vs ray"] = m["ray"] / m["muster"]
        m = report("(2) read -> map_batches -> iter_torch_batches", interleave(mapt, args.repeats), args.rows)
        ratios["map_torch vs pyarrow"] = m["pyarrow"] / m["muster"]
        if with_ray:
            ratios["map_torch vs ray"] = m["ray"] / m["muster"]
        table = pa.table({"id": np.arange(args.shuffle_rows, dtype=np.int64),
                          "x": np.random.default_rng(1).random(args.shuffle_rows, dtype=np.float32)})
        m = report(f"(3) per-epoch shuffle of {args.shuffle_rows:,} rows",
                   interleave(shuffle_contenders(table, with_ray), max(2, args.repeats - 2)), args.shuffle_rows)
        ratios["shuffled / unshuffled throughput"] = m["muster unshuffled"] / m["muster"]
        ratios["same, order drawn inline"] = m["muster unshuffled"] / m["muster, order inline"]
        ratios["shuffle vs pyarrow"] = m["pyarrow"] / m["muster"]
        if with_ray:
            ratios["shuffle vs ray"] = m["ray"] / m["muster"]
        del table
        m = report("(4) 2,000 small files, end to end", interleave(files, args.repeats), None, " (seconds)")
        ratios["small files muster seconds"] = m["muster"]
        if with_ray:
            ratios["small files vs ray"] = m["ray"] / m["muster"]
        m = report("(5) time to first batch", interleave(first, args.repeats), None, " (seconds)")
        ratios["first batch muster seconds"] = m["muster"]
        budget = 32 * 2**20
        big_rss = os.path.join(tmp, "rss")
        rss_rows = 5 * budget // 20  # 20 bytes a row uncompressed: 5x the budget
        make_parquet(big_rss, rss_rows, 20)
        rss = {"pyarrow": lambda: rss_run("pyarrow", big_rss, budget), "muster": lambda: rss_run("muster", big_rss, budget)}
        m = report(f"(6) peak RSS growth, dataset {rss_rows * 20 / 2**20:.0f} MiB, budget {budget / 2**20:.0f} MiB",
                   interleave(rss, 3), None, " (MiB)")
        ratios["peak RSS / budget"] = m["muster"] * 2**20 / budget
        ratios.update(sql_scenario(tmp, args, with_ray, quiet=True))
    print("\nratios (>1 means muster is faster / smaller):")
    for k, v in ratios.items():
        print(f"  {k:36s} {v:8.2f}")


def sql_scenario(tmp: str, args: argparse.Namespace, with_ray: bool, quiet: bool = False) -> dict[str, float]:
    import muster.data as md

    db = os.path.join(tmp, "bench.sqlite")
    make_sqlite(db, args.sql_rows)
    sql = {"sqlite3 + pyarrow": lambda: raw_sql(db), "muster": lambda: sql_read(md, db)}
    if with_ray:
        import ray.data

        sql["ray"] = lambda: sql_read(ray.data, db)
    m = report(f"(7) read_sql of {args.sql_rows:,} sqlite3 rows -> iter_batches", interleave(sql, args.repeats),
               args.sql_rows)
    ratios = {"read_sql vs sqlite3 + pyarrow": m["sqlite3 + pyarrow"] / m["muster"]}
    if with_ray:
        ratios["read_sql vs ray"] = m["ray"] / m["muster"]
    if not quiet:
        print("\nratios (>1 means muster is faster):")
        for k, v in ratios.items():
            print(f"  {k:36s} {v:8.2f}")
    return ratios


if __name__ == "__main__":
    main()

"""The ``muster`` command: look at runs and at the machine.

    muster runs list [--storage-path P]
    muster runs show NAME [--storage-path P]
    muster logs NAME [--rank N] [--tail N] [--follow] [--storage-path P]
    muster logs APP[/DEPLOYMENT] [--replica N] [--tail N] [--follow]   (a Serve app's replicas)
    muster dashboard [--storage-path P] [--host H] [--port N] [--token T]
    muster status [--address A] [--storage-path P]
    muster serve run|deploy|status|shutdown ...

Ray's cluster commands (``start``, ``stop``, ``up``, ``down``, ``job``) are not muster's: typed from a
ported tutorial, each exits with status 2 and says what to run instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any

from muster.core import settings


def _when(ts: float | None) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _reader(storage_path: str) -> Any:
    """The run store's reader for ``storage_path``, or None when nothing was recorded there."""
    from muster.observe.store.reader import StoreNotFoundError, StoreReader

    try:
        return StoreReader.for_root(storage_path)
    except StoreNotFoundError:
        return None


def _folder_runs(storage_path: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, path, state)`` of every run folder directly under ``storage_path``."""
    from muster.train.storage import RUN_STATE, Storage

    out = []
    root = Storage(storage_path, "_")
    for name in root.listdir(root.root):
        st = Storage(storage_path, name)
        path = st.join(st.run_dir, RUN_STATE)
        if st.exists(path):
            out.append((name, st.uri, st.read_json(path)))
    return out


def _all_runs(storage_path: str) -> list[dict[str, Any]]:
    """Runs from the store (Tune trials included), plus run folders it does not know (older runs)."""
    reader = _reader(storage_path)
    rows: list[dict[str, Any]] = []
    known: set[str] = set()
    if reader is not None:
        for r in reader.runs():
            ckpts = reader.checkpoints(r["id"])
            rows.append({**r, "latest": ckpts[-1]["path"] if ckpts else None})
            known.add(r["path"].rstrip("/"))
    for name, path, state in _folder_runs(storage_path):
        if path.rstrip("/") not in known:
            rows.append({"name": name, "path": path, "status": state.get("status", "?"), "stale": False,
                         "num_workers": state.get("num_workers"), "updated_at": state.get("updated_at"),
                         "latest": state.get("latest_checkpoint"), "experiment": state.get("experiment")})
    return sorted(rows, key=lambda r: r.get("updated_at") or 0)


def cmd_runs_list(args: argparse.Namespace) -> int:
    runs = _all_runs(args.storage_path)
    if not runs:
        print(f"No runs in {args.storage_path}.")
        return 0
    print(f"{'NAME':40} {'STATUS':12} {'WORKERS':>7} {'UPDATED':19}  {'EXPERIMENT':16} LATEST CHECKPOINT")
    for r in runs:
        latest = (r.get("latest") or "-").rstrip("/").rsplit("/", 1)[-1]
        status = "STALE" if r.get("stale") else r.get("status", "?")
        workers = r.get("num_workers") if r.get("num_workers") is not None else "?"
        print(f"{r['name']:40} {status:12} {workers:>7} {_when(r.get('updated_at')):19}  "
              f"{r.get('experiment') or '-':16} {latest}")
    return 0


def _find(storage_path: str, name: str) -> dict[str, Any] | None:
    for r in reversed(_all_runs(storage_path)):
        if name in (r["name"], r["path"], r["path"].rstrip("/").rsplit("/", 1)[-1]):
            return r
    return None


def _no_run(name: str, storage_path: str) -> int:
    print(f"No run {name!r} in {storage_path}; `muster runs list --storage-path {storage_path}` shows what is "
          "there.", file=sys.stderr)
    return 2


def cmd_runs_show(args: argparse.Namespace) -> int:
    from muster.train import Result
    from muster.train.storage import RUN_STATE, Storage

    found = _find(args.storage_path, args.name)
    if found is None:
        return _no_run(args.name, args.storage_path)
    parent, folder = found["path"].rstrip("/").rsplit("/", 1)
    st = Storage(parent, folder)
    state = st.read_json(st.join(st.run_dir, RUN_STATE)) if st.exists(st.join(st.run_dir, RUN_STATE)) else {}
    result = Result.from_path(st.uri)
    status = "STALE (its driver is gone)" if found.get("stale") else state.get("status", found.get("status"))
    print(f"run        {found['name']}  ({status})")
    print(f"path       {st.uri}")
    if found.get("experiment"):
        print(f"trial      {found.get('trial_id')} of experiment {found['experiment']}  "
              f"config {json.dumps(found.get('config'), default=str)}")
    print(f"trainer    {state.get('trainer')}, {state.get('num_workers')} worker(s)")
    print(f"created    {_when(state.get('created_at'))}   updated {_when(state.get('updated_at'))}")
    print(f"reports    {len(result.all_reports)} (all ranks)")
    if result.metrics:
        print(f"last       {json.dumps(result.metrics, default=str)}")
    print(f"checkpoints {len(result.best_checkpoints)} kept; "
          f"latest: {result.checkpoint.path if result.checkpoint else '-'}")
    if result.best_checkpoints:
        best, metrics = result.best_checkpoints[0]
        print(f"best       {best.path}  {json.dumps(metrics, default=str)}")
    reader = _reader(args.storage_path)
    if reader is not None and "id" in found:
        _print_store_details(reader, found["id"])
    else:
        for i, failure in enumerate(state.get("failures") or [], 1):
            print(f"failure {i}: {failure.strip().splitlines()[0]}")
    return 0


def _print_store_details(reader: Any, run_id: int) -> None:
    attempts = reader.attempts(run_id)
    for a in attempts:
        took = f"{a['ended_at'] - a['started_at']:.1f} s" if a.get("ended_at") else "running"
        print(f"attempt {a['attempt']}  {a['status']:9} {took:>9}" + (f"  {a['cause']}" if a.get("cause") else ""))
    workers = reader.workers(run_id)
    if workers:
        print(f"{'RANK':>4} {'STATE':9} {'HOST':16} {'PID':>7} {'STEP':>9} {'DATA WAIT':>9}  NOTE")
        for w in workers:
            step = f"{w['step_s']:.3f}s" if w.get("step_s") else "-"
            wait = f"{w['data_wait_s']:.3f}s" if w.get("data_wait_s") is not None and w.get("step_s") else "-"
            note = f"STRAGGLER: {w['reason']}" if w.get("straggler") else ""
            print(f"{w['rank']:>4} {w['state']:9} {w['host'][:16]:16} {w['pid']:>7} {step:>9} {wait:>9}  {note}")
    failures = [e for e in reader.events(run_id) if e["kind"] == "failure"]
    for i, e in enumerate(failures, 1):
        print(f"failure {i}: {_when(e['time'])} attempt {e['attempt']}: {e['message'].splitlines()[0]}")


def cmd_logs(args: argparse.Namespace) -> int:
    reader = _reader(args.storage_path)
    run = reader.find_run(args.name) if reader is not None and args.replica is None else None
    if run is None and reader is not None and reader.find_serve(args.name):
        return _serve_logs(reader, args)
    if run is None:
        if args.replica is not None:
            print(f"No Serve app or deployment {args.name!r} recorded in {args.storage_path}; `muster dashboard "
                  f"--storage-path {args.storage_path}` lists them (Serve records under MUSTER_STORAGE_PATH).",
                  file=sys.stderr)
            return 1
        return _no_run(args.name, args.storage_path)
    after, last_pass = 0, not args.follow
    lines = reader.logs(run["id"], args.rank, 0, args.tail)
    while True:
        for line in lines:
            print(f"(rank {line['rank']}, pid={line['pid']}) {line['line']}", flush=True)
            after = line["id"]
        if last_pass:
            return 0
        # once the run has ended, one more pass picks up lines recorded just before the end
        last_pass = (reader.run(run["id"]) or {}).get("status") != "RUNNING"
        if not last_pass:
            time.sleep(1.0)
        lines = reader.logs(run["id"], args.rank, after, 10_000)


def _serve_logs(reader: Any, args: argparse.Namespace) -> int:
    """What the replicas of a Serve app (or one deployment) printed; ``--replica N`` is the ``#N`` of their label."""
    pairs = reader.find_serve(args.name)
    after = 0
    lines = reader.serve_logs(pairs, args.replica, 0, args.tail)
    while True:
        for line in lines:
            print(f"(serve {line['app']}/{line['deployment']} #{line['replica']}, pid={line['pid']}) {line['line']}",
                  flush=True)
            after = line["id"]
        if not args.follow or not any(r["state"] == "RUNNING" for a, d in pairs for r in reader.serve_replicas(a, d)):
            return 0
        time.sleep(1.0)
        lines = reader.serve_logs(pairs, args.replica, after, 10_000)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from muster.observe.dashboard.server import serve
    from muster.observe.store.reader import StoreNotFoundError

    try:
        serve(args.storage_path, args.host, args.port, args.token)
    except StoreNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())) or "-"


def _running_runs(storage_path: str) -> list[str]:
    """Runs whose status is RUNNING and whose driver is still alive (not STALE)."""
    try:
        return [r["name"] for r in _all_runs(storage_path) if r.get("status") == "RUNNING" and not r.get("stale")]
    except (OSError, ValueError):
        return []


def cmd_status(args: argparse.Namespace) -> int:
    """The engine a script here would use, its nodes and resources, and the runs still running."""
    from muster.core import api

    address = args.address or settings.cluster_address()
    if address == "auto":
        address = api._running_ray_cluster() or "local"
    if address in (None, "", "local"):
        from muster.core.local.slots import detect_total

        total = detect_total(None, None, None)
        print("engine     local (embedded; starts with your script, no daemon)")
        print("nodes      1 (this machine)")
        print(f"resources  {_fmt(total)} (each script's engine has all of them; none is shared)")
    else:
        try:
            from muster.core.ray.status import describe
        except ImportError:
            print(f"MUSTER_ADDRESS/RAY_ADDRESS is {address!r}, a Ray cluster; install Ray to reach it: "
                  'pip install "muster[ray]"', file=sys.stderr)
            return 2
        try:
            info = describe(address)
        except ConnectionError as exc:
            print(str(exc), file=sys.stderr)
            return 2
        alive = [n for n in info["nodes"] if n["alive"]]
        print(f"engine     ray (cluster at {address})")
        print(f"nodes      {len(alive)} alive"
              + (f", {len(info['nodes']) - len(alive)} dead" if len(alive) < len(info["nodes"]) else ""))
        for n in info["nodes"]:
            role = "head" if n["head"] else "worker"
            state = "" if n["alive"] else "  DEAD"
            print(f"  {n['id'][:12]}  {n['ip']:15} {role:6}  total {_fmt(n['total'])}  free {_fmt(n['free'])}{state}")
        print(f"resources  total {_fmt(info['total'])}")
        print(f"           free  {_fmt(info['free'])}")
        if info["drivers"] is not None:
            print(f"drivers    {info['drivers']} muster script(s) connected")
    running = _running_runs(args.storage_path)
    print(f"storage    {args.storage_path}")
    print(f"running    {', '.join(running) if running else 'no runs'}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from muster import __version__
    from muster.observe.dashboard.server import DEFAULT_HOST, DEFAULT_PORT

    parser = argparse.ArgumentParser(prog="muster", description="Look at muster runs and this machine.")
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    storage = argparse.ArgumentParser(add_help=False)
    storage.add_argument("--storage-path", default=settings.storage_path_default(),
                         help="the RunConfig storage_path of your runs (default: %(default)s)")
    runs = sub.add_parser("runs", help="training runs in a storage path")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    runs_sub.add_parser("list", parents=[storage], help="every run, oldest first").set_defaults(fn=cmd_runs_list)
    show = runs_sub.add_parser("show", parents=[storage], help="one run: summary, checkpoints, failures, workers")
    show.add_argument("name")
    show.set_defaults(fn=cmd_runs_show)
    logs = sub.add_parser("logs", parents=[storage], help="what a run's workers (or a Serve app's replicas) printed")
    logs.add_argument("name")
    logs.add_argument("--rank", type=int, default=None, help="only this rank")
    logs.add_argument("--replica", type=int, default=None,
                      help="NAME is a Serve app or app/deployment: only its replica #N (the number in its log prefix)")
    logs.add_argument("--tail", type=int, default=1000, help="the last N lines (default: %(default)s)")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing while the run is going")
    logs.set_defaults(fn=cmd_logs)
    dash = sub.add_parser("dashboard", parents=[storage], help="serve the web dashboard (read-only)")
    dash.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    dash.add_argument("--port", type=int, default=DEFAULT_PORT, help="port; 0 picks a free one (default: %(default)s)")
    dash.add_argument("--token", default=None,
                      help="access token; required (and generated when not given) for a non-loopback --host")
    dash.set_defaults(fn=cmd_dashboard)
    status = sub.add_parser("status", parents=[storage],
                            help="the engine, its nodes and resources, and the runs still running")
    status.add_argument("--address", default=None,
                        help="a Ray cluster ('auto', 'ray://head:10001', 'head:6379'); default: MUSTER_ADDRESS / "
                             "RAY_ADDRESS, else this machine")
    status.set_defaults(fn=cmd_status)
    from muster.serve.cli_commands import register as register_serve

    register_serve(sub)
    return parser


_CLUSTER_HINT = ("For several machines, start a Ray cluster with Ray's own CLI (pip install \"muster[ray]\"): "
                 "`ray start --head --port=6379` on the head, `ray start --address=<head-ip>:6379` on each other "
                 "node, then muster.init(address=\"auto\") in the script (docs/multi-node.md).")

#: Ray CLI commands that muster does not have -> what to do instead (``ray start`` -> ``muster start``)
_RAY_ONLY_COMMANDS = {
    "start": "muster needs no daemon on one machine: the engine starts with your script (muster.init() "
             "or the first .remote()) and ends with it. " + _CLUSTER_HINT,
    "stop": "muster has no daemon to stop: each script's engine ends with the script (or muster.shutdown()). "
            "`ray stop` stops a Ray cluster's processes on a node. " + _CLUSTER_HINT,
    "up": "muster launches no clusters: launch one with Ray's `ray up cluster.yaml` (pip install \"muster[ray]\"), "
          "then call muster.init(address=\"auto\") in a script on it (docs/multi-node.md).",
    "down": "muster launches no clusters: `ray down cluster.yaml` tears down one that Ray's launcher started.",
    "job": "Run the script itself (python script.py); on a Ray cluster it connects with "
           "muster.init(address=\"auto\"). " + _CLUSTER_HINT,
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's arguments. A command that sets ``interspersed`` (``serve run``'s ``key=value``
    builder arguments) takes its values after options too, as Ray's click commands do."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    dest = getattr(args, "interspersed", None)
    if dest and extra and all("=" in e and not e.startswith("-") for e in extra):
        getattr(args, dest).extend(extra)
        extra = []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _RAY_ONLY_COMMANDS:
        print(f"muster: there is no `muster {argv[0]}` (Ray's `ray {argv[0]}`). {_RAY_ONLY_COMMANDS[argv[0]]} "
              "`muster status` shows the engine and its resources.", file=sys.stderr)
        return 2
    args = parse(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())

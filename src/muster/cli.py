"""The ``muster`` command: look at runs and at the machine.

    muster runs list [--storage-path P]
    muster runs show NAME [--storage-path P]
    muster status
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from muster.core import settings


def _when(ts: float | None) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _runs(storage_path: str) -> list[tuple[str, dict[str, Any]]]:
    from muster.train.storage import RUN_STATE, Storage

    out = []
    root = Storage(storage_path, "_")
    for name in root.listdir(root.root):
        st = Storage(storage_path, name)
        path = st.join(st.run_dir, RUN_STATE)
        if st.exists(path):
            out.append((name, st.read_json(path)))
    return sorted(out, key=lambda item: item[1].get("updated_at") or 0)


def cmd_runs_list(args: argparse.Namespace) -> int:
    runs = _runs(args.storage_path)
    if not runs:
        print(f"No runs in {args.storage_path}.")
        return 0
    print(f"{'NAME':40} {'STATUS':12} {'WORKERS':>7} {'UPDATED':19}  LATEST CHECKPOINT")
    for name, state in runs:
        latest = (state.get("latest_checkpoint") or "-").rstrip("/").rsplit("/", 1)[-1]
        print(f"{name:40} {state.get('status', '?'):12} {state.get('num_workers', '?'):>7} "
              f"{_when(state.get('updated_at')):19}  {latest}")
    return 0


def cmd_runs_show(args: argparse.Namespace) -> int:
    from muster.train import Result
    from muster.train.storage import RUN_STATE, Storage

    st = Storage(args.storage_path, args.name)
    state_path = st.join(st.run_dir, RUN_STATE)
    if not st.exists(state_path):
        print(f"No run {args.name!r} in {args.storage_path}; `muster runs list` shows what is there.",
              file=sys.stderr)
        return 2
    state = st.read_json(state_path)
    result = Result.from_path(st.uri)
    print(f"run        {args.name}  ({state.get('status')})")
    print(f"path       {st.uri}")
    print(f"trainer    {state.get('trainer')}, {state.get('num_workers')} worker(s)")
    print(f"created    {_when(state.get('created_at'))}   updated {_when(state.get('updated_at'))}")
    print(f"reports    {len(result.all_reports)} (all ranks)")
    if result.metrics:
        print(f"last       {json.dumps(result.metrics, default=str)}")
    print(f"checkpoints {len(result.best_checkpoints)} kept; latest: {result.checkpoint.path if result.checkpoint else '-'}")
    if result.best_checkpoints:
        best, metrics = result.best_checkpoints[0]
        print(f"best       {best.path}  {json.dumps(metrics, default=str)}")
    for i, failure in enumerate(state.get("failures") or [], 1):
        print(f"failure {i}: {failure.strip().splitlines()[0]}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from muster.core.local.engine import _detect_total

    total = _detect_total(None, None, None)
    address = settings.cluster_address()
    print("engine     local (embedded; starts with your script, no daemon)")
    if address:
        print(f"note       MUSTER_ADDRESS/RAY_ADDRESS is set to {address!r}, which this build does not use")
    print(f"resources  {', '.join(f'{k}={v:g}' for k, v in sorted(total.items()))}")
    print(f"storage    {settings.storage_path_default()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from muster import __version__

    parser = argparse.ArgumentParser(prog="muster", description="Look at muster runs and this machine.")
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="training runs in a storage path")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    for name, fn in (("list", cmd_runs_list), ("show", cmd_runs_show)):
        p = runs_sub.add_parser(name)
        if name == "show":
            p.add_argument("name")
        p.add_argument("--storage-path", default=settings.storage_path_default())
        p.set_defaults(fn=fn)
    status = sub.add_parser("status", help="the engine and the resources it would use")
    status.set_defaults(fn=cmd_status)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())

"""A user's training script, run as its own process by test_orphans.py.

    python _orphans_driver.py MODE OUTDIR

Runs a real ``TorchTrainer`` with 2 workers whose loop writes its pid to
``OUTDIR/worker-<rank>.pid`` and then, by MODE:

* ``return``: reports and returns;
* ``raise``:  raises (so ``fit()`` raises);
* ``sleep``:  sleeps forever (the test then signals this driver).

For ``return`` and ``raise`` the driver, still alive after ``fit()``, checks
that the trainer already ended its workers and writes the pids it still sees
alive to ``OUTDIR/after-fit.json``; then it exits (``raise``: by letting the
error propagate).
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil

from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def loop(config):
    import muster.train as train

    rank = train.get_context().get_world_rank()
    path = os.path.join(config["outdir"], f"worker-{rank}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    if config["mode"] == "raise":
        raise RuntimeError(f"planned failure on rank {rank}")
    if config["mode"] == "sleep":
        while True:
            time.sleep(0.5)
    train.report({"rank": rank})


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _still_alive_after_fit(outdir: str) -> list[int]:
    pids = []
    for name in sorted(os.listdir(outdir)):
        if name.startswith("worker-") and name.endswith(".pid"):
            with open(os.path.join(outdir, name)) as f:
                pids.append(int(f.read()))
    deadline = time.monotonic() + 5
    alive = [p for p in pids if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive if len(pids) == 2 else [-1]  # -1: the workers never wrote their pids


def main() -> None:
    mode, outdir = sys.argv[1], sys.argv[2]
    trainer = TorchTrainer(
        loop,
        train_loop_config={"mode": mode, "outdir": outdir},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=os.path.join(outdir, "results"), name=f"orphans-{mode}"),
    )
    outcome = "?"
    try:
        trainer.fit()
        outcome = "returned"
    except Exception as exc:
        outcome = type(exc).__name__
        raise
    finally:
        if mode in ("return", "raise"):
            report = {"outcome": outcome, "alive": _still_alive_after_fit(outdir)}
            with open(os.path.join(outdir, "after-fit.json"), "w") as f:
                json.dump(report, f)


if __name__ == "__main__":
    main()

"""A training loop for elastic runs, and the check that its data position survived every resize."""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict

import torch
from torch.utils.data import DataLoader, TensorDataset

import muster.train as train
from muster.train import Checkpoint
from muster.train.torch import prepare_data_loader

N_SAMPLES = 32


def elastic_loop(config):
    """Two shuffled epochs, one sample per step; every step reports the sample ids it consumed,
    with a checkpoint (the step and epoch) so any resize resumes right there."""
    step, start_epoch, resumed = 0, 0, None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"))
        step, start_epoch, resumed = state["step"], state["epoch"], state["step"]
    ctx = train.get_context()
    data = TensorDataset(torch.arange(N_SAMPLES))
    loader = prepare_data_loader(DataLoader(data, batch_size=1, shuffle=True))
    for epoch in range(start_epoch, 2):
        for (ids,) in loader:
            step += 1
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"step": step, "epoch": epoch}, os.path.join(tmp, "state.pt"))
                train.report(
                    {"ids": ids.tolist(), "epoch": epoch, "step": step, "resumed": resumed,
                     "world": ctx.get_world_size(), "attempt": ctx.get_attempt()},
                    checkpoint=Checkpoint.from_directory(tmp),
                )
            time.sleep(config.get("step_s", 0.05))
            if config.get("stall") and ctx.get_attempt() == 0 and step >= 3:
                while True:  # the test takes a node away now
                    time.sleep(0.1)


def check_data_position(reports: list[dict]) -> list[int]:
    """Every sample of each epoch was consumed, and none consumed before a resize was seen
    again after it. Returns the world size of each attempt that made progress."""
    attempts = sorted({r["_attempt"] for r in reports})
    kept = []
    for i, a in enumerate(attempts):
        rows = [r for r in reports if r["_attempt"] == a]
        later = [r for r in reports if r["_attempt"] in attempts[i + 1:]]
        # Work after the checkpoint the next attempt started from was lost (and redone): drop it.
        until = min((r["resumed"] or 0 for r in later), default=None)
        kept.append([r for r in rows if until is None or r["step"] <= until])
    worlds = [rows[0]["world"] for rows in kept if rows]
    for epoch in (0, 1):
        seen_before: set[int] = set()
        for rows in kept:
            segment = [i for r in rows if r["epoch"] == epoch for i in r["ids"]]
            again = seen_before & set(segment)
            assert not again, f"epoch {epoch}: samples {sorted(again)} were consumed again after a resize"
            seen_before |= set(segment)
        assert seen_before == set(range(N_SAMPLES)), (
            f"epoch {epoch}: samples {sorted(set(range(N_SAMPLES)) - seen_before)} were skipped")
    return worlds


def counts_by_attempt(reports: list[dict]) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for r in reports:
        out[r["_attempt"]] = max(out[r["_attempt"]], r["world"])
    return dict(out)

"""Exact resume: what each rank saves with a checkpoint besides the user's files.

Every ``report()`` carries this rank's *resume state* — the position of each
prepared data loader and the python / numpy / torch RNG states — to the
controller, which writes it into the committed checkpoint as
``.muster/rank_<r>.pt``.  A new attempt reads it back:

* each prepared loader (matched by creation order) continues its epoch at
  the first batch not yet consumed, skipping by index (no data is loaded
  twice);
* the RNG states are restored when the first prepared loader starts its
  first pass — after the user has rebuilt the model and loaded its
  weights, exactly where the uninterrupted run was when it reported.

A rank that never reports (the ``rank == 0`` pattern) takes the loader
positions of the lowest rank that did (DDP keeps ranks in step); its own RNG
state was never seen, so only its loaders resume exactly.
"""

from __future__ import annotations

import io
import pickle
import random
import sys
from typing import Any, Protocol

STATE_DIR = ".muster"


def state_file(rank: int) -> str:
    return f"{STATE_DIR}/rank_{rank}.pt"


class Resumable(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ResumeBook:
    """Per-process registry of prepared loaders and the state to restore."""

    def __init__(self, restore: dict[str, Any] | None = None):
        self._loaders: list[Resumable] = []
        self._restore = restore or {}
        self._rng_pending = "rng" in self._restore

    def register(self, loader: Resumable) -> None:
        saved = self._restore.get("loaders", [])
        index = len(self._loaders)
        self._loaders.append(loader)
        if index < len(saved):
            loader.load_state_dict(saved[index])

    def before_iteration(self) -> None:
        """Called by a prepared loader when a pass starts: restore RNG once."""
        if self._rng_pending:
            self._rng_pending = False
            set_rng(self._restore["rng"])

    def capture(self) -> bytes:
        """This rank's resume state as bytes: a plain pickle, torch's RNG states held as raw bytes.

        Every ``report()`` pays this, so it stays well under a millisecond: ``torch.save`` (a zip
        archive) cost ~10 ms a report, and a worker that never imported torch need not import it."""
        state = {"loaders": [loader.state_dict() for loader in self._loaders], "rng": get_rng()}
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def load(data: bytes, own_rng: bool) -> dict[str, Any]:
    if not data.startswith(b"PK"):  # a plain pickle (this version's format)
        state = pickle.loads(data)
    else:  # torch.save's zip archive: what earlier versions wrote when torch was imported
        import torch

        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    if not own_rng:
        state.pop("rng", None)
    return state


def get_rng() -> dict[str, Any]:
    out: dict[str, Any] = {"python": random.getstate()}
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:  # never imported: nothing drew from it, and importing it costs ~25-100 ms
        out["numpy"] = np_random.get_state()
    torch = sys.modules.get("torch")
    if torch is None:
        return out
    out["torch"] = torch.get_rng_state().numpy().tobytes()  # bytes: plain pickle, no torch.save
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = [s.cpu().numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
    return out


def set_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state:
        import torch

        torch.set_rng_state(_as_tensor(torch, state["torch"]))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([_as_tensor(torch, s) for s in state["cuda"]])


def _as_tensor(torch: Any, value: Any) -> Any:
    """An RNG state as torch takes it: saved as bytes (this version) or as a tensor (earlier ones)."""
    if isinstance(value, (bytes, bytearray)):
        return torch.frombuffer(bytearray(value), dtype=torch.uint8)
    return value


_book = ResumeBook()


def book() -> ResumeBook:
    return _book


def reset(restore: dict[str, Any] | None) -> None:
    global _book
    _book = ResumeBook(restore)

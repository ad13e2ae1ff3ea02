"""Which task of its operator a block function runs in, for the expressions whose values depend on it
(``random(seed=...)`` and ``monotonically_increasing_id()``, as Ray's rest on its ``TaskContext``).

``execution`` numbers the jobs of each fused chain (0, 1, ...) and runs each under :func:`running`; a block
function reads :func:`current`. A function run outside any job (a group's projection inside an all-to-all
operator) gets this process's shared context: task 0, whose counters go on across calls, so ids stay unique.

The pass (``epoch``) is the execution's number among its dataset's executions (:class:`Executions`): as Ray's
``DataContext._execution_idx``, shared by a source and every dataset derived from it, so each ``take_all``,
``count``, ``iter_batches`` pass... of any of them is the next one.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class TaskContext:
    """One task of an operator: its index among the operator's tasks, the pass (``epoch``) it belongs to,
    and counters an expression keeps across the blocks of the task (keyed by the expression)."""

    task_idx: int
    epoch: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def advance(self, key: str, by: int) -> int:
        """The counter ``key``'s value before adding ``by`` to it (0 the first time)."""
        with self.lock:
            start = self.counters.get(key, 0)
            self.counters[key] = start + by
            return start


class Executions:
    """How many times a dataset's lineage has run: each execution takes the next number (0 first), which
    seeds what a pass draws (``random(seed=...)``, per-pass shuffles)."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, int]:
        return {"next": self._next}  # an iterator sent to a worker goes on counting there

    def __setstate__(self, state: dict[str, int]) -> None:
        self._next, self._lock = state["next"], threading.Lock()

    @property
    def next(self) -> int:
        """The number the next execution will take."""
        return self._next

    def take(self) -> int:
        """The next execution's number, counting it."""
        with self._lock:
            taken, self._next = self._next, self._next + 1
            return taken

    def restart_at(self, number: int) -> None:
        """Make ``number`` the next execution's (an iterator resumed from its saved state)."""
        with self._lock:
            self._next = number


_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("muster_data_task", default=None)
_unscoped = TaskContext(task_idx=0)


def current() -> TaskContext:
    """The running task's context (this process's shared one outside any task)."""
    return _current.get() or _unscoped


@contextlib.contextmanager
def running(task_idx: int, epoch: int) -> Iterator[TaskContext]:
    """Run the body as task ``task_idx`` of pass ``epoch``."""
    ctx = TaskContext(task_idx=task_idx, epoch=epoch)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)

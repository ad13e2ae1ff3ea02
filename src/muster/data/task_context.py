"""Which task of its operator a block function runs in, for the expressions whose values depend on it
(``random(seed=...)`` and ``monotonically_increasing_id()``, as Ray's rest on its ``TaskContext``).

``execution`` numbers the jobs of each fused chain (0, 1, ...) and runs each under :func:`running`; a block
function reads :func:`current`. A function run outside any job (a group's projection inside an all-to-all
operator) gets this process's shared context: task 0, whose counters go on across calls, so ids stay unique.
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

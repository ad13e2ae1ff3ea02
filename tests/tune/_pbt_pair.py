"""Two PBT trials, a weak and a strong one, that overlap however far apart their workers start.

PBT ranks only live trials (a finished one is no donor), so a test whose weak trial must exploit the strong one
needed both to run at once: on a loaded machine a trial's worker can start later than the other trial's whole run
(0.4-1.8 s here), and then nothing was exploited (``num_perturbations >= 1`` failed). With these marks, in the
folder ``marks``: the weak trial starts once the strong one has a result, and the strong one holds at its step
``HOLD_AT`` until a trial was restarted from a checkpoint (an exploit), or ``TIMEOUT_S``. A run with no exploit
still fails the test, only 30 s later.
"""

from __future__ import annotations

import os
import time

HOLD_AT = 4
TIMEOUT_S = 30.0


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def at_start(marks: str | None, restored: bool, weak: bool) -> None:
    """A trial's start: one restarted from a checkpoint marks it; the weak one, first started, waits until the
    strong one has a result (handled by the controller: a function trainable's report returned). No ``marks``
    (the trainable used outside such a pair): nothing."""
    if marks is None:
        return
    if restored:
        open(os.path.join(marks, "restored"), "w").close()
    elif weak:
        _wait_for(os.path.join(marks, "strong"))


def after_result(marks: str | None, step: int, strong: bool) -> None:
    """After the strong trial's result of ``step`` was handled: it marks that it has one, and at ``HOLD_AT`` it
    stays live until the weak trial was exploited."""
    if strong and marks is not None:
        open(os.path.join(marks, "strong"), "w").close()
        if step == HOLD_AT:
            _wait_for(os.path.join(marks, "restored"))

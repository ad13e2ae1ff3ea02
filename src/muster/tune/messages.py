"""What a trainable's worker and the Tune controller tell each other about one step.

A ``tune.Trainable`` asks before it reports each step's result (one that says ``done``
ends the trial anyway), and steps no further until answered: the controller acts on the result (stopper,
scheduler, searcher, callbacks) and answers whether the trial ends there and whether
a callback asked for a checkpoint, so that the worker can save the trainable and report
the result with that checkpoint, as Ray saves a trial that a stop condition ends
(``checkpoint_at_end``) or whose result a callback marked ``should_checkpoint``.

A function trainable's ``tune.report`` reports first (its checkpoint committed), then asks whether
it may go on (``AwaitDecision``) and runs no further until answered: as in Ray, where the function's
thread waits in ``report`` until the controller asks for its next result, a trial stopped on a
result reports nothing after it (its process is killed while it waits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepResult:
    """Worker -> driver: the result ``step()`` returned, not yet reported, and when."""

    metrics: dict[str, Any]
    time: float
    pid: int | None = None  # the trial's process (Tune's ``pid`` field)
    host: str | None = None  # and its host name and IP (``hostname``, ``node_ip``)
    ip: str | None = None


@dataclass(frozen=True)
class AwaitDecision:
    """Worker -> driver: the result just reported (in order before this message): may the trial go on?
    Answered with a ``StepDecision`` once the controller acted on that result."""


@dataclass(frozen=True)
class StepDecision:
    """Driver -> worker: whether the trial ends with this result, the Tune fields
    (``time_total_s``, ``trial_id``...) the controller acted on, to report with it, and
    whether a callback asked for a checkpoint with it (``result[SHOULD_CHECKPOINT] = True``)."""

    ends: bool
    fields: dict[str, Any] = field(default_factory=dict)
    checkpoint: bool = False

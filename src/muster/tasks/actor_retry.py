"""Retrying an actor's calls, as Ray does with ``max_task_retries`` and ``retry_exceptions``.

A call is sent again while its ``max_task_retries`` last (-1: no limit): at once, to the same actor, when it
raised an exception its ``retry_exceptions`` name; once the actor is back, when it died with the actor and the
actor restarts. A call sent again goes out before any call not sent yet, in the order they were retried; a
generator call's later attempts build on the items its earlier ones yielded (:class:`AttemptItems`).

:class:`CallRetries` keeps this for one actor (:class:`muster.tasks.actor._Actor`): which calls may be sent
again, how many retries each has left, and which wait to be sent again. The actor asks it, then acts (sends,
settles). Not thread-safe on its own: the actor calls :meth:`CallRetries.queue`, :meth:`CallRetries.take_resend`
and :meth:`CallRetries.died` under the lock its process and attempt change under.
"""

from __future__ import annotations

from typing import Any, Literal

from muster.exceptions import ActorDiedError
from muster.tasks import options as opts
from muster.tasks.generators import AttemptItems

#: one call, as queued and as sent: (token, method, num_returns, args, kwargs, concurrency group, Retries, out)
Call = tuple


class CallRetries:
    """The retries of one actor's calls: the calls it may send again, their retries left, the ones to resend."""

    def __init__(self) -> None:
        self._sent: dict[int, Call] = {}  # calls sent to the actor, answer not back yet (for retries)
        self._left: dict[int, int] = {}  # token -> retries left, once a call was retried
        self._awaiting_restart: list[Call] = []  # calls to send again once the actor is back
        self._resend: list[Call] = []  # ... and back: sent before any other call
        self._items = AttemptItems()  # generator calls: what their retried attempts yielded

    def sending(self, call: Call) -> None:
        """``call`` goes to the actor now: keep it while its answer is out, if it may be sent again."""
        if call[-2].max_task_retries or call[2] in ("streaming", "dynamic"):
            self._sent[call[0]] = call

    def sent(self, token: int) -> Call | None:
        """The call ``token``, sent and kept by :meth:`sending`, its answer not back yet; else None."""
        return self._sent.get(token)

    def spend(self, call: Call, error: BaseException, restarts: bool) -> Literal["raised", "died"] | None:
        """Spend one of ``call``'s retries on ``error``, when its options retry it, as in Ray: ``"raised"``,
        an exception its ``retry_exceptions`` name (send it again now); ``"died"``, the death of its actor,
        which ``restarts`` (send it again to the actor once it is back); None: no retry, settle it."""
        token, retries = call[0], call[-2]
        left = self._left.get(token, retries.max_task_retries)
        if left == 0:
            return None
        raised = opts.retries_exception(retries.retry_exceptions, error)
        if not raised and (not isinstance(error, ActorDiedError) or not restarts):
            return None
        self._left[token] = left - 1 if left > 0 else left
        return "raised" if raised else "died"

    def queue(self, call: Call, after_restart: bool) -> None:
        """Send ``call`` again before any call not sent yet: with the next call sent, or ``after_restart``,
        once the actor's process it died with is replaced (see :meth:`died`)."""
        (self._awaiting_restart if after_restart else self._resend).append(call)

    def take_resend(self) -> list[Call]:
        """The calls to send again now, in their order; they are the sender's from here."""
        batch, self._resend = self._resend, []
        return batch

    def died(self, restarts: bool) -> list[Call]:
        """The actor's process died: the calls that wait for its restart go out first to the new process when
        it ``restarts``; else they are returned, for the actor to fail."""
        waiting, self._awaiting_restart = self._awaiting_restart, []
        if restarts:
            self._resend += waiting
            return []
        return waiting

    def failed(self, call: Call, ok: bool, value: Any) -> tuple[bool, Any]:
        """An attempt's answer ``(ok, value)`` of ``call`` as its retries see it: a generator's items that end in
        an error its ``retry_exceptions`` name fail it (see :meth:`AttemptItems.failed`)."""
        return self._items.failed(call[0], call[2], call[-2].retry_exceptions, ok, value)

    def merged(self, token: int, ok: bool, value: Any) -> tuple[bool, Any]:
        """The answer ``(ok, value)`` of call ``token`` after what its earlier attempts yielded."""
        return self._items.merged(token, ok, value)

    def never_sent(self, token: int) -> None:
        """Forget the call ``token``: cancelled before it was sent, it never will be."""
        self._left.pop(token, None)
        self._items.forget(token)

    def answered(self, token: int) -> None:
        """Forget the call ``token``: its answer is back."""
        self._sent.pop(token, None)
        self._left.pop(token, None)

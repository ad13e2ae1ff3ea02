"""Serve's errors (Ray Serve's names where it has one)."""

from __future__ import annotations

import math
from typing import Any

from muster.exceptions import InvalidArgumentError, MusterError, TaskCancelledError


class RayServeException(MusterError):
    """A Serve operation failed (Ray's name, kept so ported ``except`` clauses work)."""


class BackPressureError(RayServeException):
    """Every replica is at ``max_ongoing_requests`` and the queue is at ``max_queued_requests``.
    As Ray's: ``message``, and ``status_code`` and ``retry_after_s`` (seconds, or None) are what HTTP answers
    (the deployment's ``backpressure_config``; unset: 503 and ``Retry-After: 1``)."""

    def __init__(self, message: str, status_code: int = 503, retry_after_s: float | None = None):
        super().__init__(message, status_code, retry_after_s)  # all in args: the error pickles whole
        self.status_code, self.retry_after_s = status_code, retry_after_s

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def retry_after(self) -> str | None:
        """The ``Retry-After`` header's value: ``retry_after_s`` rounded up to whole seconds, or None."""
        return None if self.retry_after_s is None else str(max(0, math.ceil(self.retry_after_s)))


class DeployFailedError(RayServeException, RuntimeError):
    """``serve.run`` could not start an application: a replica's constructor, or a deployment actor's, raised.
    As Ray's ``serve.run`` raises then, it is a ``RuntimeError`` too; ``serve.status()`` shows the app
    ``DEPLOY_FAILED`` with this message until it is deployed again or deleted."""


class RoutePrefixTakenError(RayServeException, InvalidArgumentError):
    """``serve.run`` gave an app a ``route_prefix`` another app already serves. A ``RayServeException``, as Ray
    raises then, and a ``ValueError``: the value given is the fault."""


class DeploymentUnavailableError(RayServeException):
    """No replica of the deployment answered in time (none running, or all died)."""

    @property
    def message(self) -> str:  # Ray's
        return str(self)


class ReplicaUnavailableError(RayServeException):
    """The replica chosen for a request is no longer available (Ray's name; muster raises its subclass
    :class:`ReplicaDiedError`)."""

    @property
    def message(self) -> str:  # Ray's
        return str(self)


class ReplicaDiedError(ReplicaUnavailableError):
    """The replica serving this request died before it answered."""


class RequestCancelledError(RayServeException, TaskCancelledError):
    """The request was cancelled (``response.cancel()``) before it finished; as Ray's, also a
    ``TaskCancelledError``."""

    def __init__(self, message: str = "the request was cancelled by response.cancel()"):
        Exception.__init__(self, message)
        self.label, self.reason = "request", message

    def __reduce__(self) -> Any:
        return (type(self), (str(self),))


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.exceptions", name)

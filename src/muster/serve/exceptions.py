"""Serve's errors (Ray Serve's names where it has one)."""

from __future__ import annotations

from muster.exceptions import MusterError


class RayServeException(MusterError):
    """A Serve operation failed (Ray's name, kept so ported ``except`` clauses work)."""


class BackPressureError(RayServeException):
    """Every replica is at ``max_ongoing_requests`` and the queue is at ``max_queued_requests``."""


class DeploymentUnavailableError(RayServeException):
    """No replica of the deployment answered in time (none running, or all died)."""


class ReplicaDiedError(RayServeException):
    """The replica serving this request died before it answered."""


class RequestCancelledError(RayServeException):
    """The request was cancelled before it finished."""

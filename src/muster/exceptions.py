"""Every error muster raises, under one root.

Three families, as STYLE.md asks:

* user input      -- ``InvalidArgumentError``/``InvalidTypeError``, also
                     ``ValueError``/``TypeError``, raised before any work
                     starts (bad config, bad resource request);
* worker failure  -- a remote function raised, or a worker process died;
* infrastructure  -- the engine could not give what was asked.

All of them pickle across processes (``__reduce__`` keeps every field), and
every message says what happened and what to do about it.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading
from typing import Any, TypeVar


class MusterError(Exception):
    """Root of every error muster raises on purpose."""


# --------------------------------------------------------------------------
# user input: also the builtin, so ``except ValueError`` / ``except TypeError`` still work
# --------------------------------------------------------------------------
class InvalidArgumentError(MusterError, ValueError):
    """A bad value for an argument or config field; the message names it and the fix."""


class InvalidTypeError(MusterError, TypeError):
    """An argument of the wrong type; the message names what to pass instead."""


# --------------------------------------------------------------------------
# infrastructure
# --------------------------------------------------------------------------
class ResourcesUnavailableError(MusterError):
    """The engine can never satisfy a resource request (not merely busy)."""

    def __init__(self, message: str, requested: dict | None = None, total: dict | None = None):
        super().__init__(message)
        self.requested = dict(requested or {})
        self.total = dict(total or {})

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0], self.requested, self.total))


class GetTimeoutError(MusterError, TimeoutError):
    """``get``/``result`` waited past its timeout."""


class ClusterUnreachableError(MusterError, ConnectionError):
    """``muster.init(address=...)`` found no Ray cluster answering at that address."""


class StorageNotSharedError(MusterError):
    """A worker cannot see the run's storage (a local path on a multi-node cluster)."""


class RuntimeNotStartedError(MusterError):
    """An operation needed the engine, but it was shut down."""


# --------------------------------------------------------------------------
# worker failure
# --------------------------------------------------------------------------
def describe_exit(exitcode: int | None) -> str:
    """Human words for a process exit status (negative = killed by signal)."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = (" (sent by a person, a tool, or the kernel's out-of-memory killer: check `dmesg`)"
                if -exitcode == signal.SIGKILL else "")
        return f"killed by {name}{hint}"
    return f"exited with code {exitcode}"


class WorkerCrashedError(MusterError):
    """A worker process died while it had work to do.

    Attributes:
        pid: the worker's process id.
        exitcode: its exit code; negative means it was killed by that signal.
        label: what the worker was to the caller (``"rank 1"``, ``"task f"``).
        host: the node it ran on.
    """

    def __init__(self, label: str, pid: int | None, exitcode: int | None, host: str = "", reason: str = ""):
        self.label, self.pid, self.exitcode, self.host, self.reason = label, pid, exitcode, host, reason
        where = " ".join(([f"pid {pid}"] if pid is not None else []) + ([f"on {host}"] if host else []))
        where = f" ({where})" if where else ""  # Ray does not say which process ran a task that died
        super().__init__(f"{label}{where} died: {reason or describe_exit(exitcode)}")

    @property
    def signal(self) -> int | None:
        return -self.exitcode if self.exitcode is not None and self.exitcode < 0 else None

    def __reduce__(self) -> Any:
        return (type(self), (self.label, self.pid, self.exitcode, self.host, self.reason))


class ActorDiedError(WorkerCrashedError):
    """The process hosting an actor died; its pending and later calls fail.

    Attributes:
        actor_id: the actor's id in hex, as ``get_runtime_context().get_actor_id()`` gave it
            inside the actor (Ray's ``RayActorError.actor_id``); None before it is known.
    """

    actor_id: str | None = None

    def __reduce__(self) -> Any:
        return _with_actor_id, (type(self), (self.label, self.pid, self.exitcode, self.host, self.reason),
                                self.actor_id)


def _with_actor_id(cls: type[ActorDiedError], args: tuple, actor_id: str | None) -> ActorDiedError:
    error = cls(*args)
    error.actor_id = actor_id
    return error


class ActorUnavailableError(ActorDiedError):
    """A call the actor's process died under, while the actor restarts (it has ``max_restarts`` left).

    As Ray's: the actor lives on (later calls go to its new process), but this call failed and may
    or may not have run. Also an ``ActorDiedError`` (muster's ``RayActorError``), as Ray's is a
    ``RayActorError``, so handlers of a dead actor still catch it; ``except ActorUnavailableError``
    catches only this case. ``reason`` says how the process died and that the actor restarts.
    """


def restarting_reason(cause: str, restarts_left: int) -> str:
    """The ``reason`` of an :class:`ActorUnavailableError`: ``cause`` (how the process died), that the
    actor restarts with ``restarts_left`` more restarts after this one (negative: unlimited), and what to do."""
    left = "unlimited" if restarts_left < 0 else str(restarts_left)
    return (f"{cause or 'its process ended'}. The actor is restarting (restarts left after this one: {left}); "
            "this call may or may not have run. Call it again (later calls go to the restarted actor), or give "
            "the actor or the method max_task_retries to have muster send such calls again itself")


class TaskError(MusterError):
    """A remote function or method raised.

    Attributes:
        cause: the original exception (when it could be pickled), else None.
        cause_type: the original exception's qualified type name.
        remote_traceback: the traceback text from the worker.
        label / pid / host: where it ran.
    """

    def __init__(
        self,
        cause_type: str,
        message: str,
        remote_traceback: str,
        label: str = "",
        pid: int | None = None,
        host: str = "",
        cause: BaseException | None = None,
        cause_parts: tuple[type, tuple, dict] | None = None,
    ):
        if cause is None and cause_parts is not None:
            cause = _rebuilt(*cause_parts)
        self.cause_type, self.message, self.remote_traceback = cause_type, message, remote_traceback
        self.label, self.pid, self.host, self.cause = label, pid, host, cause
        # an exception whose __init__ cannot be called again with its args (e.g. __init__(self, msg, code)
        # passing only msg on) travels as (class, args, attributes) and is rebuilt without calling __init__
        self.cause_parts = cause_parts
        where = f"{label} (pid {pid}{', ' + host if host else ''})" if label else f"pid {pid}"
        super().__init__(
            f"{cause_type}: {message}\n\nRaised in {where}; remote traceback:\n{remote_traceback.rstrip()}"
        )

    @property
    def function_name(self) -> str:
        """What raised, by name (Ray's ``RayTaskError.function_name``): the function, or the actor's class."""
        return self.label.removeprefix("task ").removeprefix("actor ")

    @property
    def traceback_str(self) -> str:
        """The remote traceback (Ray's name for it)."""
        return self.remote_traceback

    def relabelled(self, label: str, pid: int | None = None, host: str | None = None) -> "TaskError":
        """The same error, naming another place it ran (a new one: the message is made when built)."""
        return TaskError(self.cause_type, self.message, self.remote_traceback, label,
                         pid if pid is not None else self.pid, host if host is not None else self.host,
                         self.cause, self.cause_parts)

    def __reduce__(self) -> Any:
        cause = None if self.cause_parts is not None else self.cause
        return (
            type(self),
            (self.cause_type, self.message, self.remote_traceback, self.label, self.pid, self.host, cause,
             self.cause_parts),
        )


def _rebuilt(cls: type, args: tuple, state: dict) -> BaseException | None:
    """An instance of exception class ``cls`` with ``args`` and attributes ``state``, made without its ``__init__``."""
    try:
        exc: BaseException = BaseException.__new__(cls)
        exc.args = args
        exc.__dict__.update(state)
        return exc
    except Exception:  # noqa: BLE001 - not an exception class we can make: the message stays
        return None


# --------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------
class TrainerSetupError(MusterError, RuntimeError):
    """A framework's trainer (Lightning, Transformers) given to ``prepare_trainer`` is set up so that each
    worker would train alone, or without muster's ranks; the message names the setting and the fix. A
    ``RuntimeError``, as Ray's ``prepare_trainer`` raises."""


class TrainingFailedError(MusterError):
    """``Trainer.fit()`` failed and its failure budget is spent.

    Attributes:
        attempts: one entry per attempt that failed, in order; each is the root
            cause of that attempt (the first failure seen: a ``TaskError`` from
            a rank that raised, or a ``WorkerCrashedError`` for one that died).
        run_path: where the run's results and checkpoints are.
    """

    def __init__(self, attempts: list[BaseException], run_path: str = "", max_failures: int = 0,
                 subject: str = "Training"):
        self.attempts, self.run_path, self.max_failures = list(attempts), run_path, max_failures
        self.subject = subject  # "Training", or "Trial <id>" for a Tune trial's run
        lines = [
            f"{subject} failed after {len(self.attempts)} attempt(s) "
            f"(FailureConfig(max_failures={max_failures}))."
        ]
        for i, err in enumerate(self.attempts, 1):
            lines.append(f"\n--- attempt {i}: root cause ---\n{err}")
        if run_path:
            lines.append(
                f"\nResults and committed checkpoints are in {run_path}. To continue from the "
                "latest checkpoint, fix the cause and run again with the same RunConfig(name=..., "
                "storage_path=...), or raise FailureConfig(max_failures=...) to retry automatically."
            )
        super().__init__("\n".join(lines))

    @property
    def root_cause(self) -> BaseException | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def worker_failures(self) -> dict[int, BaseException]:
        """Ray V2's ``WorkerGroupError.worker_failures``, ``{rank: error}``: here the rank whose failure
        ended the last attempt (muster records each attempt's first failure); empty when no rank failed."""
        return by_rank(self.root_cause)

    def __reduce__(self) -> Any:
        # by this class, not type(self): a copy made an instance of the user's error type too
        # (see also_an_instance_of) pickles as the plain error
        return (TrainingFailedError, (self.attempts, self.run_path, self.max_failures,
                                      getattr(self, "subject", "Training")))


def by_rank(error: BaseException | None) -> dict[int, BaseException]:
    """``{rank: error}`` for an error a training rank raised or died of (its ``label`` is ``"rank N"``);
    empty for any other error. The error is what the rank's code raised, as Ray V2 unwraps its
    ``UserExceptionWithTraceback``, where muster's ``TaskError`` carries one that pickled back; else ``error``
    itself (a rank that died: ``WorkerCrashedError``)."""
    label = getattr(error, "label", "")
    rank = label.removeprefix("rank ") if isinstance(label, str) and label.startswith("rank ") else ""
    if not rank.isdigit() or error is None:
        return {}
    raised = error.cause if isinstance(error, TaskError) and error.cause is not None else error
    return {int(rank): raised}


def expect_instance(owner: str, arg: str, value: Any, cls: type | tuple[type, ...], fix: str) -> None:
    """Refuse ``owner(arg=value)`` unless ``value`` is None or a ``cls``, before any work starts, so a
    dict given for a config object fails here, not later as an AttributeError deep inside.

    Args:
        owner: what the user called, as they wrote it (``"TorchTrainer"``, ``"RunConfig"``).
        arg: the argument's name.
        fix: what to pass instead, in that API's words (``"a muster.train.ScalingConfig, e.g. ..."``).

    Raises:
        InvalidTypeError: naming the call, the argument, the value and ``fix``.
    """
    if value is not None and not isinstance(value, cls):
        raise InvalidTypeError(f"{owner}({arg}={value!r}): pass {fix}.")


def checked_timeout(call: str, value: Any, arg: str = "timeout") -> float | None:
    """``call(arg=value)``'s timeout in seconds: None (wait as long as it takes) or a number >= 0, as Ray's calls
    take; one past what the platform can wait (``float("inf")``) is None.

    Raises:
        InvalidTypeError: not a number (a string, a bool).
        InvalidArgumentError: negative, or NaN.
    """
    if value is None:
        return None
    fix = "use a number of seconds >= 0 (0: do not wait), or None to wait until the result is ready"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{call}({arg}={value!r}): {fix}.")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgumentError(f"{call}({arg}={value!r}): {fix}.")
    return None if seconds >= threading.TIMEOUT_MAX else seconds


def methods_of(obj: Any) -> list[str]:
    """The public methods of a class or an instance (callable, no leading ``_``), sorted by name."""
    return sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))


def no_such_method(name: str, methods: list[str]) -> str:
    """The part of a "no method ``name``" message that lists ``methods``, a likely typo's match first
    (``"did you mean 'increment'? its methods are ['increment', 'get']"``)."""
    import difflib

    if not methods:
        return "it has no public methods"
    close = difflib.get_close_matches(name, methods, n=1)
    listed = close + [m for m in methods if m not in close]
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"{guess}its methods are {listed}"


E_ = TypeVar("E_", bound=BaseException)


def also_an_instance_of(err: E_, cls: type[BaseException], attributes: dict[str, Any] | None = None) -> E_:
    """``err`` as an instance of a class made from both its class and ``cls``, so that
    ``except cls`` catches it (Ray's task errors are instances of the task's exception type),
    with ``attributes`` (the original exception's, e.g. its ``.code``) under ``err``'s own;
    ``err`` itself when ``cls`` cannot be a base class."""
    try:
        base = type(err)
        # err's own str wins over cls's (KeyError's would print the whole message as a repr, quotes and \n)
        dual = type(f"{base.__name__}({cls.__name__})", (base, cls),
                    {"__module__": base.__module__, "__str__": base.__str__})
        out: E_ = dual.__new__(dual)  # type: ignore[call-overload]
        out.__dict__.update(attributes or {})
        out.__dict__.update(err.__dict__)
        out.args = err.args
        return out
    except TypeError:  # a class that cannot be a base (e.g. final builtins), or layouts that clash
        return err


def root_cause_summary(error: BaseException, tail: int = 3) -> str:
    """A few lines for a console: the root cause's type and message, and its last traceback lines.

    Unwraps ``TrainingFailedError`` to the failure that came first in its last
    attempt, and a ``TaskError`` to the remote exception it carries.
    """
    while isinstance(error, TrainingFailedError) and error.root_cause is not None:
        error = error.root_cause
    if isinstance(error, TaskError):
        head = f"{error.cause_type}: {error.message}".strip()
        where = f" (in {error.label})" if error.label else ""
        lines = [ln for ln in error.remote_traceback.rstrip().splitlines() if ln.strip()]
        # The last line of a traceback repeats the message: show the frames above it.
        frames = lines[:-1][-tail:] if len(lines) > 1 else []
        return "\n".join([head + where, *frames])
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


# --------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------
class RunOutputWarning(UserWarning):
    """A warning a run's live output has already printed (``[muster] WARNING: ...``).

    Recorded as any warning (``pytest.warns``, ``warnings.catch_warnings``, ``-W error``), but
    not printed a second time: a filter muster adds after the defaults ignores it, and any
    ``-W``/``filterwarnings`` of your own comes first.
    """


class TaskCancelledError(MusterError):
    """``get`` on a task (or actor call) that ``muster.cancel`` cancelled."""

    def __init__(self, label: str = "task", reason: str = "cancelled by muster.cancel()"):
        self.label, self.reason = label, reason
        super().__init__(f"{label} was {reason}" if reason.startswith("cancelled") else f"{label}: {reason}")

    def __reduce__(self) -> Any:
        return (type(self), (self.label, self.reason))


class TaskPlacementGroupRemoved(MusterError):
    """A task's placement group was removed (``remove_placement_group``) before the task got its bundle."""


class ActorPlacementGroupRemoved(MusterError):
    """An actor's placement group was removed before the actor got its bundle (one running in it dies)."""


# Ray raises these where muster's engine cannot fail that way; they exist so that
# ported ``except`` clauses and ``isinstance`` checks keep working.
class ObjectLostError(MusterError):
    """An object's value was lost (Ray: its node died). muster's driver owns every value: not raised."""


class ObjectFreedError(ObjectLostError):
    """Ray: an object was freed by its owner (``ray._private.internal_api.free``). Not raised by muster."""


class ObjectReconstructionFailedError(ObjectLostError):
    """Ray: a lost object could not be rebuilt from its lineage. Not raised by muster."""


class ObjectFetchTimedOutError(ObjectLostError):
    """Ray: fetching an object from another node timed out. Not raised by muster."""


class OwnerDiedError(ObjectLostError):
    """An object's owner died. muster's driver owns every object: not raised."""


class ObjectStoreFullError(MusterError):
    """Ray's object store ran out of memory. muster keeps values in the driver: not raised."""


class OutOfDiskError(MusterError):
    """Ray's object store spilled past the disk. Not raised by muster."""


class OutOfMemoryError(MusterError):
    """Ray's memory monitor killed a worker. On muster that shows as ``WorkerCrashedError`` (SIGKILL)."""


class NodeDiedError(MusterError):
    """A node of a Ray cluster died. On muster's engine a lost process is ``WorkerCrashedError``."""


class RuntimeEnvSetupError(MusterError):
    """Ray could not build a runtime_env (on an engine that runs on a Ray cluster). The embedded engine only
    copies local folders, and refuses bad ones where they are given: not raised there."""


class ActorAlreadyExistsError(InvalidArgumentError):
    """An actor of that name already exists in the namespace (Ray's class; still a ``ValueError``)."""


class PendingCallsLimitExceeded(MusterError):
    """Ray: an actor's ``max_pending_calls`` was exceeded. Not raised by muster."""


class AsyncioActorExit(MusterError):
    """Ray: raised inside an async actor by ``exit_actor()``. Not raised by muster."""


# --------------------------------------------------------------------------
# Ray's names (``ray.exceptions`` -> ``muster.exceptions``): the same classes.
# --------------------------------------------------------------------------
RayError = MusterError
RaySystemError = MusterError
RayTaskError = TaskError
RayActorError = ActorDiedError
TaskUnschedulableError = ResourcesUnavailableError
ActorUnschedulableError = ResourcesUnavailableError
LocalRayletDiedError = RuntimeNotStartedError


class UnsupportedRayAPIError(MusterError, AttributeError):
    """A Ray API muster does not provide; the message names the nearest muster equivalent.

    Also an ``AttributeError``, so ``hasattr(muster, name)`` stays False.
    """


class UnsupportedRayImportError(MusterError, ImportError):
    """The same, raised by ``from muster.x import Name``, the form ported scripts use most.

    An ``ImportError``, as that statement raises for any name it cannot import (Python would
    turn an ``AttributeError`` there into a bare "cannot import name", dropping the equivalent).
    """

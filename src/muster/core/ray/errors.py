"""What a failure Ray reports becomes for muster's users: the class muster's own engine raises for
the same situation, with what happened and what to do, never one of ``ray.exceptions``' classes.

Where Ray's class has a muster namesake kept for ported ``except`` clauses (``NodeDiedError``,
``ObjectLostError``, ``OutOfMemoryError``), the error is an instance of that one too.
"""

from __future__ import annotations

import ray

from muster import exceptions as mx

_LOG_HINT = ("Its output and Ray's worker logs (python-core-worker-*.log under /tmp/ray/session_latest/logs on "
             "its node) say why; .options(max_retries=n) reruns a task whose worker died.")


def reason(exc: BaseException) -> str:
    """The first lines of Ray's message, on one line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:3])[:400] or type(exc).__name__


def from_ray(exc: BaseException, label: str) -> BaseException:
    """Muster's error for ``exc``, a failure Ray reported for ``label`` (a task, an actor, an actor's call).

    Anything that is not one of Ray's errors is returned as it is; an actor's death
    (``RayActorError``) is its handle's to report, with where the actor ran."""
    if not isinstance(exc, ray.exceptions.RayError) or isinstance(exc, ray.exceptions.RayActorError):
        return exc
    why = reason(exc)
    if isinstance(exc, ray.exceptions.TaskCancelledError):
        return mx.TaskCancelledError(label)
    if isinstance(exc, ray.exceptions.GetTimeoutError):
        return mx.GetTimeoutError(f"{label}: Ray timed out waiting for it ({why}). Wait longer, or check "
                                  "`ray status` for a cluster that is short of resources.")
    if isinstance(exc, ray.exceptions.LocalRayletDiedError):
        return mx.RuntimeNotStartedError(
            f"{label}: the Ray node this process runs on went away ({why}). Restart the node "
            "(`ray start`) and call muster.init(address=...) again.")
    if isinstance(exc, (ray.exceptions.TaskUnschedulableError, ray.exceptions.ActorUnschedulableError)):
        return mx.ResourcesUnavailableError(
            f"{label}: the Ray cluster cannot place it ({why}). Ask for fewer resources or add nodes that have them.")
    if isinstance(exc, ray.exceptions.RuntimeEnvSetupError):
        return mx.RuntimeEnvSetupError(f"{label}: Ray could not set up its runtime_env ({why}). Fix the runtime_env.")
    namesake = _PROCESS_LOST.get(type(exc)) or next(
        (kind for ray_kind, kind in _PROCESS_LOST.items() if isinstance(exc, ray_kind)), None)
    if namesake is not None:
        crashed = mx.WorkerCrashedError(label, None, None, "", reason=f"{why} {_LOG_HINT}")
        return crashed if namesake is mx.WorkerCrashedError else mx.also_an_instance_of(crashed, namesake)
    return mx.MusterError(f"{label} failed on Ray ({type(exc).__name__}): {why}")


# Ray's ways to lose the process that ran (or held the result of) a task: a WorkerCrashedError, as on
# muster's engine, and also muster's class of Ray's name. Most specific first (OwnerDiedError is an
# ObjectLostError).
_PROCESS_LOST: dict[type, type[mx.MusterError]] = {
    ray.exceptions.WorkerCrashedError: mx.WorkerCrashedError,
    ray.exceptions.OutOfMemoryError: mx.OutOfMemoryError,
    ray.exceptions.NodeDiedError: mx.NodeDiedError,
    ray.exceptions.OwnerDiedError: mx.OwnerDiedError,
    ray.exceptions.ObjectLostError: mx.ObjectLostError,
}

"""The process-wide runtime: ``init``, ``shutdown`` and the engine everything else asks for."""

from __future__ import annotations

import threading

from muster.core import settings
from muster.core.runtime import Runtime

_runtime: Runtime | None = None
_lock = threading.Lock()


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    ignore_reinit_error: bool = False,
) -> Runtime:
    """Start muster's engine in this process (optional: first use starts it).

    Args:
        address: ``None`` or ``"local"`` for the embedded engine on this
            machine (default).  ``MUSTER_ADDRESS`` / ``RAY_ADDRESS`` are read
            when this is not given.  ``"auto"`` (as in ported Ray scripts)
            means this machine when no cluster address is configured.
        num_cpus: CPUs the engine may hand out (default: the CPUs this
            process may run on).  Set it higher to oversubscribe.
        num_gpus: GPUs it may hand out (default: those CUDA can see).
        resources: custom resources, e.g. ``{"accelerator_x": 2}``.
        ignore_reinit_error: return the running engine instead of raising
            when called twice.

    Returns:
        The engine.

    Raises:
        RuntimeError: already initialised (unless ``ignore_reinit_error``).
        ValueError: a bad resource amount or an unknown address.
    """
    global _runtime
    with _lock:
        if _runtime is not None:
            if ignore_reinit_error:
                return _runtime
            raise RuntimeError(
                "muster.init() was already called in this process. Call muster.shutdown() first, "
                "or pass ignore_reinit_error=True."
            )
        address = address if address is not None else settings.cluster_address()
        if address == "auto":
            # Ray's `ray.init(address="auto")`: the configured cluster, or else this machine.
            address = settings.cluster_address() or "local"
        if address in (None, "", "local"):
            from muster.core.local import LocalRuntime

            rt = LocalRuntime(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources)
        else:
            raise ValueError(
                f"muster.init(address={address!r}): this build of muster runs on its embedded engine "
                "only; the Ray cluster engine is not part of it yet. Use address='local' (or unset "
                "MUSTER_ADDRESS / RAY_ADDRESS) to run on this machine."
            )
        rt.start()  # begin importing torch in the zygote while the caller goes on
        _runtime = rt
        return rt


def get_runtime() -> Runtime:
    """The running engine, starting the default one on first use."""
    rt = _runtime
    if rt is not None:
        return rt
    return init(ignore_reinit_error=True)


def is_initialized() -> bool:
    return _runtime is not None


def shutdown() -> None:
    """Stop the engine and every worker it started. Safe to call twice."""
    global _runtime
    with _lock:
        rt, _runtime = _runtime, None
    if rt is not None:
        rt.shutdown()

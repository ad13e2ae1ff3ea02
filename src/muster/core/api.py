"""The process-wide runtime: ``init``, ``shutdown`` and the engine everything else asks for."""

from __future__ import annotations

import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, cast

from muster.core import settings
from muster.core.init_options import InitOptions, split_keywords
from muster.core.runtime import Runtime
from muster.exceptions import InvalidArgumentError
from muster.runtime_env import working_dir

if TYPE_CHECKING:
    from muster.core.local import LocalRuntime
    from muster.core.ray import RayRuntime

_runtime: Runtime | None = None
_lock = threading.Lock()
_start_hooks: list[Callable[[Runtime], None]] = []
_shutdown_hooks: list[Callable[[Runtime], None]] = []


def on_start(hook: Callable[[Runtime], None]) -> None:
    """Have ``hook(runtime)`` run for every engine ``init()`` starts (how the layers above core attach to it:
    the run store's recorder of user metrics). A failing hook warns; the engine runs on."""
    if hook not in _start_hooks:
        _start_hooks.append(hook)


def on_shutdown(hook: Callable[[Runtime], None]) -> None:
    """Have ``hook(runtime)`` run as ``shutdown()`` begins, before the engine stops (the driver's user metrics
    get their last round in). A failing hook warns; the engine still stops."""
    if hook not in _shutdown_hooks:
        _shutdown_hooks.append(hook)


def _forget_engine_in_child() -> None:
    """A forked child (the zygote, its workers, a DataLoader worker) does not own its parent's engine;
    and the lock may have been held by the thread that forked."""
    global _runtime, _lock
    _runtime, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_engine_in_child)


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    ignore_reinit_error: bool = False,
    configure_logging: bool = True,
    logging_level: int | str | None = None,
    logging_format: str | None = None,
    log_to_driver: bool = True,
    namespace: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    **ray_keywords: Any,
) -> Runtime:
    """Start muster's engine in this process (optional: first use starts it).

    Args:
        address: ``None`` or ``"local"`` for the embedded engine on this
            machine (default).  ``"ray://<head>:10001"`` (Ray Client) or
            ``"<head-ip>:6379"`` runs on that Ray cluster (``pip install
            "muster[ray]"``); ``"auto"`` (as in ported Ray scripts) means the
            configured cluster, else the one ``ray start`` runs on this
            machine, else the embedded engine.  ``MUSTER_ADDRESS`` /
            ``RAY_ADDRESS`` are read when this is not given.
        num_cpus: CPUs the engine may hand out (default: the CPUs this
            process may run on).  Set it higher to oversubscribe.  Local
            engine only: a Ray cluster's nodes declare their own.
        num_gpus: GPUs it may hand out (default: those CUDA can see).
        resources: custom resources, e.g. ``{"accelerator_x": 2}``.
        ignore_reinit_error: return the running engine instead of raising
            when called twice.
        configure_logging / logging_level / logging_format: with a level or a
            format, set up the ``muster`` logger (a handler on stderr).
        log_to_driver: ``False`` keeps workers' output off this console
            (the run store still records it).
        namespace: where named actors are registered and looked up.
        runtime_env: ``{"env_vars": {...}}`` is set for every worker started
            afterwards, and its ``worker_process_setup_hook`` runs in each; a
            ``working_dir``/``py_modules`` given as local paths is copied now
            and every worker runs in the copy (on a Ray cluster, Ray's own
            ``ray.init`` uploads it); other keys warn and do nothing.
        **ray_keywords: Ray's other ``init`` keywords (``include_dashboard``,
            ``dashboard_host``/``dashboard_port``, ``object_store_memory``,
            ``local_mode``, ``_temp_dir``, ...), accepted and ignored: see
            :mod:`muster.core.init_options`; of ``job_config`` (a
            ``muster.job_config.JobConfig``), its ``runtime_env`` and
            ``ray_namespace`` are used where ``runtime_env``/``namespace`` are not given.

    Returns:
        The engine.

    Raises:
        RuntimeError: already initialised (unless ``ignore_reinit_error``).
        ValueError: a bad resource amount or an unknown address.
        ImportError: a cluster address without Ray installed.
        TypeError: a keyword neither muster's nor Ray's ``init`` takes.
    """
    global _runtime
    split_keywords(ray_keywords)  # an unknown keyword is a TypeError naming it
    job = ray_keywords.get("job_config")  # Ray's JobConfig: its runtime_env and namespace, unless given here
    if job is not None:
        runtime_env = runtime_env if runtime_env is not None else (getattr(job, "runtime_env", None) or None)
        namespace = namespace if namespace is not None else getattr(job, "ray_namespace", None)
    options = InitOptions(
        configure_logging=configure_logging, logging_level=logging_level, logging_format=logging_format,
        log_to_driver=log_to_driver, namespace=namespace, runtime_env=runtime_env, ignored=ray_keywords,
    )
    with _lock:
        if _runtime is not None:
            if ignore_reinit_error:
                return _runtime
            raise RuntimeError(
                "muster.init() was already called in this process. Call muster.shutdown() first, "
                "or pass ignore_reinit_error=True."
            )
        # The engine counts this machine's GPUs before runtime_env's env_vars reach os.environ: as in Ray,
        # they are the workers' environment, not the node's (its CUDA_VISIBLE_DEVICES adds no GPU).
        rt = _make_engine(address, num_cpus, num_gpus, resources)
        if rt.name == "ray":  # Ray uploads a local working_dir/py_modules for its nodes' workers
            cast("RayRuntime", rt).job_runtime_env = working_dir.for_ray_init(options.runtime_env)
        options.apply()
        settings.start_session()
        rt.start()  # begin importing torch in the zygote while the caller goes on
        _runtime = rt
    for hook in list(_start_hooks):
        try:
            hook(rt)
        except Exception as exc:  # noqa: BLE001 - what attaches to the engine never stops it
            warnings.warn(f"muster.init(): {hook!r} failed ({exc!r}); the engine runs without it.",
                          RuntimeWarning, stacklevel=2)
    return rt


def _make_engine(
    address: str | None, num_cpus: float | None, num_gpus: float | None, resources: dict[str, float] | None
) -> "LocalRuntime | RayRuntime":
    configured = settings.cluster_address()
    if address is None:
        address = configured
    if address == "auto":
        # Ray's `ray.init(address="auto")`: the configured cluster, else one started on this
        # machine with `ray start --head`, else muster's embedded engine.
        address = configured if configured not in (None, "auto") else _running_ray_cluster() or "local"
    if address in (None, "", "local"):
        from muster.core.local import LocalRuntime

        return LocalRuntime(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources)
    if not isinstance(address, str) or not (address.startswith("ray://") or ":" in address):
        raise InvalidArgumentError(
            f"muster.init(address={address!r}): use 'local' (this machine), 'auto' (the Ray cluster this "
            "machine belongs to), 'ray://<head>:10001' (Ray Client) or '<head-ip>:6379' (the head's GCS)."
        )
    if num_cpus is not None or num_gpus is not None or resources:
        raise InvalidArgumentError(
            f"muster.init(address={address!r}, num_cpus/num_gpus/resources=...): a Ray cluster's resources "
            "are set when its nodes start (`ray start --num-cpus=N --num-gpus=M --resources='{...}'`); "
            "drop these arguments."
        )
    try:
        from muster.core.ray import RayRuntime
    except ImportError as exc:
        raise ImportError(
            f"muster.init(address={address!r}) runs on a Ray cluster, which needs Ray: "
            'pip install "muster[ray]" (or unset MUSTER_ADDRESS / RAY_ADDRESS to run on this machine).'
        ) from exc
    return RayRuntime(address)


def _running_ray_cluster() -> str | None:
    """The GCS address ``ray start --head`` recorded on this machine, if that cluster answers."""
    import socket

    try:
        with open(settings.ray_address_file()) as f:
            address = f.read().strip()
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=0.5):
            return address
    except (OSError, ValueError):
        return None


def get_runtime() -> Runtime:
    """The running engine, starting the default one on first use."""
    rt = _runtime
    if rt is not None:
        return rt
    return init(ignore_reinit_error=True)


def is_initialized() -> bool:
    return _runtime is not None


def running() -> Runtime | None:
    """The running engine, or None (never starts one)."""
    return _runtime


def is_current(runtime: Runtime) -> bool:
    """Whether ``runtime`` is the running engine (not one since shut down)."""
    return runtime is _runtime


def shutdown() -> None:
    """Stop the engine and every worker it started. Safe to call twice."""
    global _runtime
    with _lock:
        rt, _runtime = _runtime, None
    if rt is None:
        return
    for hook in list(_shutdown_hooks):
        try:
            hook(rt)
        except Exception as exc:  # noqa: BLE001 - the engine stops regardless
            warnings.warn(f"muster.shutdown(): {hook!r} failed ({exc!r}).", RuntimeWarning, stacklevel=2)
    rt.shutdown()

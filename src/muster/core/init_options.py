"""Ray's ``ray.init`` keywords that ``muster.init`` takes besides its own.

Scripts written for Ray pass these; muster honours the ones that mean
something on its engine and accepts the rest as documented no-ops (never a
``TypeError``):

=========================  ====================================================
honoured                   ``configure_logging``, ``logging_level``,
                           ``logging_format`` (the ``muster`` logger, when a
                           level or format is given);
                           ``log_to_driver`` (worker output on the driver's
                           console); ``namespace`` (named actors);
                           ``runtime_env={"env_vars": {...}}`` (set for every
                           worker started afterwards), its
                           ``worker_process_setup_hook`` (run in each worker
                           as it starts: ``muster.core.setup_hook``) and its
                           ``working_dir``/``py_modules`` given as local
                           paths (copied now; every worker starts in the
                           copy: ``muster.runtime_env.working_dir``);
                           ``job_config`` (``muster.job_config.JobConfig``):
                           its ``runtime_env`` and ``ray_namespace``, where
                           ``runtime_env``/``namespace`` are not given
accepted, no effect        ``include_dashboard``, ``dashboard_host``,
                           ``dashboard_port`` (muster's dashboard is
                           ``muster dashboard``), ``object_store_memory``,
                           ``local_mode``, ``labels``,
                           ``logging_config``, ``enable_resource_isolation``,
                           ``system_reserved_cpu``/``_memory``, and Ray's
                           ``_``-prefixed internals (``_temp_dir``,
                           ``_system_config``, ...)
=========================  ====================================================
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from muster.core import setup_hook
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.runtime_env import working_dir
from muster.runtime_env.checks import check_env_vars, check_py_modules

#: Keywords of ``ray.init`` accepted and ignored (their job is Ray's cluster plumbing).
NO_OP_KEYWORDS = frozenset({
    "include_dashboard", "dashboard_host", "dashboard_port", "object_store_memory", "local_mode",
    "job_config", "labels", "logging_config", "enable_resource_isolation", "system_reserved_cpu",
    "system_reserved_memory",
})
#: ``runtime_env`` keys muster acts on; the others are warned about and ignored.
_RUNTIME_ENV_HONOURED = frozenset({"env_vars"})
#: ... and at ``muster.init`` also the hook every worker runs as it starts (Ray takes it there only).
_INIT_RUNTIME_ENV_HONOURED = _RUNTIME_ENV_HONOURED | {"worker_process_setup_hook"}


_warned_runtime_env: set[tuple[str, tuple[str, ...]]] = set()


def warn_unused_runtime_env(env: Any, what: str, stacklevel: int = 3,
                            honoured: frozenset[str] = _RUNTIME_ENV_HONOURED, local_dirs: bool = False) -> None:
    """Warn that ``env``'s keys other than ``honoured`` (``pip``, ``conda``, a URI ``working_dir``...)
    do nothing here, naming ``what`` took them and what is applied: never dropped silently, said once per
    ``what``. ``local_dirs``: ``what`` also applies a ``working_dir`` and ``py_modules`` given as local paths
    (``muster.runtime_env.working_dir``), so those are not warned about."""
    applied_here = working_dir.applied_keys(env) if local_dirs else set()
    unused = tuple(sorted(set(env or {}) - honoured - applied_here)) if isinstance(env, dict) else ()
    if unused and (what, unused) not in _warned_runtime_env:
        _warned_runtime_env.add((what, unused))
        applied = " and ".join(sorted(honoured))
        many = len(honoured) > 1 or local_dirs
        if local_dirs:
            applied += ", and working_dir and py_modules given as local paths"
        warnings.warn(
            f"{what}: runtime_env {', '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect on muster "
            f"(workers run in this machine's Python environment{'' if local_dirs else ' and working directory'}); "
            f"only {applied} {'are' if many else 'is'} applied. Install what they need before starting, and pass "
            "files by path or in the arguments.",
            stacklevel=stacklevel + 1,
        )

_namespace: str = "default"


def current_namespace() -> str:
    """The namespace named actors are registered in (``init(namespace=...)``; default ``"default"``)."""
    return _namespace


@dataclass(kw_only=True)
class InitOptions:
    """The Ray keywords of one ``muster.init`` call (see the module docstring)."""

    configure_logging: bool = True
    logging_level: int | str | None = None
    logging_format: str | None = None
    log_to_driver: bool = True
    namespace: str | None = None
    runtime_env: dict[str, Any] | None = None
    ignored: dict[str, Any] = field(default_factory=dict)
    _setup_hook: str | None = field(default=None, init=False, repr=False)  # the encoded worker setup hook

    def __post_init__(self) -> None:
        if isinstance(self.logging_level, str):  # "info", "WARNING", ...
            level = logging.getLevelName(self.logging_level.upper())
            if not isinstance(level, int):
                raise InvalidArgumentError(
                    f"muster.init(logging_level={self.logging_level!r}): use a logging level such as "
                    "logging.INFO or 'debug'."
                )
            self.logging_level = level
        if self.namespace is not None and (not isinstance(self.namespace, str) or not self.namespace):
            raise InvalidArgumentError(f"muster.init(namespace={self.namespace!r}): use a non-empty string.")
        env = self.runtime_env
        if env is not None and not isinstance(env, dict):
            env = getattr(env, "to_dict", lambda: None)() if hasattr(env, "to_dict") else None
            if env is None:
                raise InvalidArgumentError(
                    f"muster.init(runtime_env={self.runtime_env!r}): pass a dict such as "
                    "{'env_vars': {'NAME': 'value'}}."
                )
            self.runtime_env = env
        check_env_vars((self.runtime_env or {}).get("env_vars"), "muster.init()")  # Ray's TypeError
        check_py_modules((self.runtime_env or {}).get("py_modules"), "muster.init()")
        hook = (self.runtime_env or {}).get("worker_process_setup_hook")
        self._setup_hook = setup_hook.encode(hook) if hook is not None else None
        dirs = working_dir.resolve(self.runtime_env, "muster.init()")  # copied now, as Ray uploads them at init
        if dirs is not None:  # every worker enters them as it starts, then runs the user's hook
            self._setup_hook = setup_hook.encode(working_dir.setup_hook_for(dirs, hook))

    def apply(self) -> None:
        """Act on the honoured keywords; warn once about runtime_env keys that do nothing here."""
        global _namespace
        if self.configure_logging and (self.logging_level is not None or self.logging_format is not None):
            logger = logging.getLogger("muster")
            logger.setLevel(self.logging_level if self.logging_level is not None else logging.INFO)
            if self.logging_format is not None or not logger.handlers:
                handler = logging.StreamHandler()
                handler.setFormatter(logging.Formatter(
                    self.logging_format or "%(asctime)s %(levelname)s %(name)s: %(message)s"))
                logger.handlers[:] = [handler]
        from muster.core.local import logs

        logs.set_echo(self.log_to_driver)
        _namespace = self.namespace or "default"
        env = self.runtime_env or {}
        os.environ.update(env.get("env_vars") or {})  # workers inherit the driver's environment
        if self._setup_hook is None:
            os.environ.pop(setup_hook.HOOK_ENV, None)  # a hook of an earlier init is not this job's
        else:
            os.environ[setup_hook.HOOK_ENV] = self._setup_hook
        warn_unused_runtime_env(env, "muster.init()", honoured=_INIT_RUNTIME_ENV_HONOURED, local_dirs=True)


def split_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The no-op keywords of ``kwargs`` (Ray's known ones and ``_``-prefixed internals).

    Raises:
        TypeError: a keyword that neither muster nor Ray's ``init`` knows.
    """
    unknown = sorted(k for k in kwargs if k not in NO_OP_KEYWORDS and not k.startswith("_"))
    if unknown:
        raise InvalidTypeError(
            f"muster.init() got unknown keyword(s) {', '.join(unknown)}. It takes muster's own (address, "
            "num_cpus, num_gpus, resources, ignore_reinit_error), Ray's honoured ones (configure_logging, "
            "logging_level, logging_format, log_to_driver, namespace, runtime_env) and Ray's no-ops ("
            f"{', '.join(sorted(NO_OP_KEYWORDS))}, _-prefixed internals)."
        )
    return dict(kwargs)

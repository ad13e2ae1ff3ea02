"""``muster.job_config.JobConfig``: Ray's per-job settings, passed as ``muster.init(job_config=...)``.

muster acts on two of them: ``runtime_env`` (as ``init(runtime_env=...)``: its ``env_vars`` reach every
worker, its ``worker_process_setup_hook`` runs in each) and ``ray_namespace`` (as ``init(namespace=...)``);
``init``'s own ``runtime_env=``/``namespace=`` win over them, as in Ray. The others are kept, checked where
Ray checks them, and change nothing here: ``metadata``, ``default_actor_lifetime`` (muster's actors live
as their ``lifetime=`` option says), and the Java/cross-language ``jvm_options`` and ``code_search_path``.
"""

from __future__ import annotations

from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError

__all__ = ["JobConfig"]

_LIFETIMES = ("detached", "non_detached")


class JobConfig:
    """The settings of one job (one ``muster.init``); see the module docstring for what each does."""

    def __init__(self, jvm_options: list[str] | None = None, code_search_path: list[str] | None = None,
                 runtime_env: dict[str, Any] | None = None, _client_job: bool = False,
                 metadata: dict[str, str] | None = None, ray_namespace: str | None = None,
                 default_actor_lifetime: str = "non_detached", _disable_job_level_lineage_reconstruction: bool = False,
                 _py_driver_sys_path: list[str] | None = None):
        self.jvm_options = list(jvm_options or [])
        self.code_search_path = list(code_search_path or [])
        self.metadata: dict[str, str] = dict(metadata or {})
        self.runtime_env: dict[str, Any] = {}
        self.set_runtime_env(runtime_env)
        self.ray_namespace = ray_namespace
        self.default_actor_lifetime = "non_detached"
        self.set_default_actor_lifetime(default_actor_lifetime)
        self.py_logging_config: Any = None
        self._client_job = _client_job
        self._py_driver_sys_path = list(_py_driver_sys_path or [])

    def set_metadata(self, key: str, value: str) -> None:
        """Record ``key: value`` in the job's metadata (kept; muster shows it nowhere)."""
        self.metadata[key] = value

    def set_runtime_env(self, runtime_env: dict[str, Any] | None, validate: bool = False) -> None:
        """The job's runtime environment: a dict or ``muster.runtime_env.RuntimeEnv`` (``validate`` is Ray's
        and ignored: ``muster.init`` checks it)."""
        if runtime_env is not None and not isinstance(runtime_env, dict):
            to_dict = getattr(runtime_env, "to_dict", None)
            if to_dict is None:
                raise InvalidTypeError(f"JobConfig(runtime_env={runtime_env!r}): pass a dict such as "
                                       "{'env_vars': {'NAME': 'value'}}, or a muster.runtime_env.RuntimeEnv.")
            runtime_env = to_dict()
        self.runtime_env = dict(runtime_env or {})

    def set_ray_namespace(self, ray_namespace: str) -> None:
        """The namespace the job's named actors live in (``init(namespace=...)`` wins over it)."""
        self.ray_namespace = ray_namespace

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        """Ray's default lifetime of the job's actors, ``"detached"`` or ``"non_detached"`` (kept only)."""
        if default_actor_lifetime not in _LIFETIMES:
            raise InvalidArgumentError(f"JobConfig(default_actor_lifetime={default_actor_lifetime!r}): use "
                                       "'detached' or 'non_detached'.")
        self.default_actor_lifetime = default_actor_lifetime

    def set_py_logging_config(self, logging_config: Any = None) -> None:
        """Ray's logging config for the job's workers (kept only: use ``muster.init(logging_level=...)``)."""
        self.py_logging_config = logging_config

    @classmethod
    def from_json(cls, job_config_json: dict[str, Any]) -> JobConfig:
        """A JobConfig from the dict Ray's job APIs use (``runtime_env``, ``metadata``, ``ray_namespace``,
        ``jvm_options``, ``code_search_path``, ``client_job``, ``py_driver_sys_path``)."""
        return cls(jvm_options=job_config_json.get("jvm_options"),
                   code_search_path=job_config_json.get("code_search_path"),
                   runtime_env=job_config_json.get("runtime_env"), metadata=job_config_json.get("metadata"),
                   ray_namespace=job_config_json.get("ray_namespace"),
                   _client_job=job_config_json.get("client_job", False),
                   _py_driver_sys_path=job_config_json.get("py_driver_sys_path"))

    def __repr__(self) -> str:
        return (f"JobConfig(runtime_env={self.runtime_env!r}, ray_namespace={self.ray_namespace!r}, "
                f"metadata={self.metadata!r}, default_actor_lifetime={self.default_actor_lifetime!r})")

"""``muster.runtime_env``: Ray's ``RuntimeEnv``, a typed ``runtime_env`` dict.

It is accepted wherever a ``runtime_env`` dict is (``muster.init``, ``.options()``, ``ray_actor_options``,
``ScalingConfig``-started workers). As with the dict, muster applies ``env_vars``, and a ``working_dir`` and
``py_modules`` given as local paths (:mod:`muster.runtime_env.working_dir`); every other key (``pip``, ``conda``,
a URI ``working_dir``...) is kept, and warned about once where it is used: workers run in this machine's Python
environment.
"""

from __future__ import annotations

from typing import Any

from muster.runtime_env.checks import check_runtime_env


class RuntimeEnv(dict):
    """``RuntimeEnv(env_vars={"NAME": "value"}, pip=[...], ...)``: a dict of the keys given."""

    def __init__(self, *, env_vars: dict[str, str] | None = None, **fields: Any):
        if env_vars is not None:
            fields["env_vars"] = env_vars
        fields = {k: v for k, v in fields.items() if v is not None}
        check_runtime_env(fields, "RuntimeEnv(...)")  # a malformed pip, working_dir or env_vars, as Ray's
        if env_vars is not None:
            fields["env_vars"] = dict(env_vars)
        super().__init__(fields)

    def env_vars(self) -> dict[str, str]:
        return dict(self.get("env_vars") or {})

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


class RuntimeEnvConfig(dict):
    """Ray's runtime-environment setup options (``setup_timeout_seconds``, ``eager_install``): muster sets up
    nothing, so they are kept and have no effect."""

    def __init__(self, setup_timeout_seconds: int = 600, eager_install: bool = True, **fields: Any):
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install, **fields)


__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]

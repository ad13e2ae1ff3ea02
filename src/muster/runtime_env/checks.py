"""The checks Ray makes of a ``runtime_env`` where it is given (``.options()``, ``@remote(...)``, ``muster.init``,
``RuntimeEnv(...)``): a malformed value is refused there, naming it and the fix, not accepted and warned about.

A well-formed ``pip`` still does nothing here (``warn_unused_runtime_env`` says so), nor does a ``working_dir`` or
``py_modules`` given as a URI; given as local paths they are applied (``muster.runtime_env.working_dir``).
"""

from __future__ import annotations

import os
import types
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: the archives a ``working_dir`` may be, as a URI or a local file (Ray's list)
_ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar.xz")
#: the fields a ``pip`` dict may have (Ray's)
_PIP_FIELDS = ("packages", "pip_check", "pip_install_options", "pip_version")


def check_env_vars(env_vars: Any, what: str) -> None:
    """``env_vars`` (None: none) maps str names to str values; else an ``InvalidTypeError`` naming the entries
    that do not and their str form."""
    if env_vars is None:
        return
    if not isinstance(env_vars, dict):
        raise InvalidTypeError(f"{what}: runtime_env['env_vars']={env_vars!r}; env_vars maps names to string "
                               "values: pass a dict such as {'NAME': 'value'}.")
    bad = {k: v for k, v in env_vars.items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        fixed = {str(k): str(v) for k, v in bad.items()}
        raise InvalidTypeError(f"{what}: runtime_env['env_vars'] has {bad!r}; env_vars maps names to string values "
                               f"(environment variables are strings): write {fixed!r}.")


def _check_requirements_file(path: str, what: str, where: str) -> None:
    if not os.path.isfile(path):
        raise InvalidArgumentError(
            f"{what}: {where}={path!r} is not a file; a string names a requirements file (such as "
            f"'requirements.txt'); give packages as a list instead: {{'pip': [{path!r}]}}.")


def check_pip(pip: Any, what: str) -> None:
    """``pip`` is a list of package strings, the path of an existing requirements file, or a dict with
    ``packages`` (either of those) and only Ray's other pip fields."""
    if isinstance(pip, str):
        _check_requirements_file(pip, what, "runtime_env['pip']")
    elif isinstance(pip, list):
        bad = [p for p in pip if not isinstance(p, str)]
        if bad:
            raise InvalidTypeError(f"{what}: runtime_env['pip']={pip!r} has {bad!r}; list packages as strings, "
                                   "such as ['requests==2.31'].")
    elif isinstance(pip, dict):
        if "packages" not in pip:
            raise InvalidArgumentError(f"{what}: runtime_env['pip']={pip!r} has no 'packages'; add them: "
                                       "{'packages': ['requests'], ...}.")
        extra = sorted(str(k) for k in pip if k not in _PIP_FIELDS)
        if extra:
            raise InvalidArgumentError(f"{what}: runtime_env['pip'] has field(s) {extra}; use only "
                                       f"{', '.join(_PIP_FIELDS)}.")
        packages = pip["packages"]
        if isinstance(packages, str):
            _check_requirements_file(packages, what, "runtime_env['pip']['packages']")
        elif not (isinstance(packages, list) and all(isinstance(p, str) for p in packages)):
            raise InvalidTypeError(f"{what}: runtime_env['pip']['packages']={packages!r}; give a list of package "
                                   "strings or the path of a requirements file.")
    else:
        raise InvalidTypeError(f"{what}: runtime_env['pip']={pip!r}; give a list of package strings "
                               "(['requests']), the path of a requirements file, or {'packages': [...]}.")


def check_working_dir(working_dir: Any, what: str) -> None:
    """``working_dir`` is a str: a URI of an archive, an existing directory, or an existing archive file."""
    if not isinstance(working_dir, str):
        raise InvalidTypeError(f"{what}: runtime_env['working_dir']={working_dir!r}; give a directory's path "
                               "(a str) or the URI of a .zip archive.")
    if "://" in working_dir:
        if not working_dir.endswith(_ARCHIVES):
            raise InvalidArgumentError(f"{what}: runtime_env['working_dir']={working_dir!r}; a URI must name an "
                                       f"archive ({', '.join(_ARCHIVES)}), such as 's3://bucket/code.zip'.")
    elif not (os.path.isdir(working_dir) or (os.path.isfile(working_dir) and working_dir.endswith(_ARCHIVES))):
        raise InvalidArgumentError(f"{what}: runtime_env['working_dir']={working_dir!r} is not an existing "
                                   f"directory or archive ({', '.join(_ARCHIVES)}); give the path of one.")


def check_py_modules(py_modules: Any, what: str) -> None:
    """``py_modules`` (None: none) is a list of local folders, ``.py`` files, wheels, URIs or imported modules
    (Ray's ``TypeError``/``ValueError`` otherwise)."""
    if py_modules is None:
        return
    if not isinstance(py_modules, list):
        raise InvalidTypeError(f"{what}: runtime_env['py_modules']={py_modules!r}; give a list of local folders, "
                               "URIs or imported modules, such as ['./my_package'].")
    for entry in py_modules:
        if isinstance(entry, types.ModuleType):
            continue
        if not isinstance(entry, (str, os.PathLike)):
            raise InvalidTypeError(f"{what}: runtime_env['py_modules'] has {entry!r}; give file paths, URIs or "
                                   "imported modules.")
        path = str(entry)
        if "://" not in path and not (os.path.isdir(path) or (os.path.isfile(path) and path.endswith((".py", ".whl")))):
            raise InvalidArgumentError(f"{what}: runtime_env['py_modules'] has {path!r}, which is not an existing "
                                       "folder, .py file or .whl file; give the path of one (or a URI).")


def check_runtime_env(env: Any, what: str) -> None:
    """Refuse a malformed ``runtime_env`` as Ray does where it is given: not a dict, ``env_vars`` not str to str,
    ``pip`` or ``working_dir`` malformed, or ``pip`` with ``conda`` or ``uv``."""
    if env is None:
        return
    if not isinstance(env, dict):
        raise InvalidTypeError(f"{what}: runtime_env={env!r}; pass a dict such as {{'env_vars': {{'NAME': 'value'}}}}.")
    check_env_vars(env.get("env_vars"), what)
    if env.get("pip") is not None:
        check_pip(env["pip"], what)
    if env.get("working_dir") is not None:
        check_working_dir(env["working_dir"], what)
    check_py_modules(env.get("py_modules"), what)
    installers = [k for k in ("pip", "uv", "conda") if env.get(k) is not None]
    if len(installers) > 1:
        raise InvalidArgumentError(f"{what}: runtime_env sets {' and '.join(installers)}; set only one of them "
                                   "(list pip packages inside the conda environment's 'dependencies').")

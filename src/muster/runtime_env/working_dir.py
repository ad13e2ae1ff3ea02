"""A ``runtime_env``'s ``working_dir`` and ``py_modules`` given as local paths, as Ray applies them.

Ray zips such a folder when it is given and unpacks it for the workers: a worker's current directory is the
copy of ``working_dir``, which is also on ``sys.path`` (``import mymodule``, ``open("data.txt")``), and each
``py_modules`` folder (a package), ``.py`` file or imported module is importable. Files a worker writes there
never reach the user's folder. ``excludes`` (gitignore-style) and the ``.gitignore``/``.rayignore`` files in
the folder leave files out.

muster runs on one machine, so it copies instead of zipping: once per folder, ``excludes`` and kind, into a
folder of this session that ``muster.shutdown()`` removes (:func:`snapshot`). What a worker applies is a
:class:`LocalDirs`: ``muster.init``'s for the worker's whole life (through the worker setup hook,
:func:`job_setup`), an actor's for its life (:func:`enter`), a task's around the task (:func:`applied`). A
level's ``working_dir`` or ``py_modules`` replaces the job's, key by key, as Ray merges ``runtime_env``s.
URIs (``s3://``, ``https://...zip``), archives and wheels are not fetched here: they still warn. On a Ray
cluster, ``muster.init`` hands its local ``working_dir``/``py_modules`` to Ray's own ``ray.init``
(:func:`for_ray_init`), which uploads them for every node's workers.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import threading
import types
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.runtime_env.ignore_rules import IgnoreRules

#: Ray's limit on a package it uploads (its gRPC message size): 512 MiB.
MAX_BYTES = 512 * 1024 * 1024
_IGNORE_FILES = (".gitignore", ".rayignore")

_lock = threading.Lock()
_root: str | None = None  # this session's folder of snapshots
_snapshots: dict[tuple[str, tuple[str, ...], str], str] = {}  # (source, excludes, kind) -> its copy's sys.path entry


@dataclass(frozen=True)
class LocalDirs:
    """What one level of ``runtime_env`` (job, actor or task) sets: the copy of its ``working_dir`` (the
    worker's current directory, first on ``sys.path``) and the folders holding its ``py_modules``' copies
    (on ``sys.path``). None: the level does not set that key, so the job's stays."""

    working_dir: str | None = None
    py_modules: tuple[str, ...] | None = None

    def paths(self) -> list[str]:
        return ([self.working_dir] if self.working_dir else []) + list(self.py_modules or ())


def _is_local_dir(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike)) and "://" not in str(value) and os.path.isdir(value)


def _module_source(entry: Any) -> str | None:
    """The local folder or ``.py`` file a ``py_modules`` entry names; None for a URI, a wheel or else."""
    if isinstance(entry, types.ModuleType):
        paths = list(getattr(entry, "__path__", None) or [])
        return paths[0] if len(paths) == 1 else getattr(entry, "__file__", None)
    if isinstance(entry, (str, os.PathLike)) and "://" not in str(entry):
        path = str(entry)
        if os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".py")):
            return path
    return None


def applied_keys(env: Any) -> set[str]:
    """The keys of ``env`` muster applies besides ``env_vars``: ``working_dir`` when it is a local folder,
    ``py_modules`` when every entry is a local folder, ``.py`` file or module, and then ``excludes``."""
    if not isinstance(env, dict):
        return set()
    keys = set()
    if _is_local_dir(env.get("working_dir")):
        keys.add("working_dir")
    modules = env.get("py_modules")
    if isinstance(modules, list) and modules and all(_module_source(m) is not None for m in modules):
        keys.add("py_modules")
    if keys and "excludes" in env:
        keys.add("excludes")
    return keys


def resolve(env: Any, what: str) -> LocalDirs | None:
    """The copies of ``env``'s local ``working_dir`` and ``py_modules`` (made now, or earlier in this session
    for the same folder and ``excludes``); None when it has neither.

    Raises:
        InvalidTypeError: ``excludes`` is not a list of strings.
        InvalidArgumentError: a folder of ``MAX_BYTES`` or more (after ``excludes``), naming it and the fix.
    """
    keys = applied_keys(env)
    if not keys - {"excludes"}:
        return None
    excludes = env.get("excludes") or []
    if not (isinstance(excludes, list) and all(isinstance(e, str) for e in excludes)):
        raise InvalidTypeError(f"{what}: runtime_env['excludes']={excludes!r}; give a list of gitignore-style "
                               "patterns, such as ['*.ckpt', 'data/'].")
    working_dir = snapshot(str(env["working_dir"]), excludes, "working_dir", what) if "working_dir" in keys else None
    modules = None
    if "py_modules" in keys:
        modules = tuple(snapshot(str(_module_source(m)), excludes, "py_modules", what) for m in env["py_modules"])
    return LocalDirs(working_dir, modules)


def for_ray_init(env: Any) -> dict[str, Any]:
    """The keys of ``env`` that :func:`applied_keys` takes (local ``working_dir``, ``py_modules``, their
    ``excludes``), as given: what an engine on a Ray cluster hands to Ray's own ``ray.init``, which uploads the
    folders for every node's workers."""
    return {key: env[key] for key in applied_keys(env)}


_warned_ray: set[str] = set()


def on_engine(env: Any, engine: Any, what: str) -> LocalDirs | None:
    """:func:`resolve` ``env`` where ``engine`` runs workers on this machine; on a Ray cluster (whose nodes lack
    the copies) None, with a warning once per ``what``."""
    dirs = resolve(env, what)
    if dirs is None or getattr(engine, "name", None) != "ray":
        return dirs
    if what not in _warned_ray:
        _warned_ray.add(what)
        warnings.warn(f"{what}: runtime_env working_dir/py_modules given as local paths are applied on muster's "
                      "embedded engine only, not to one task or actor on a Ray cluster (as Ray refuses them there). "
                      "Give them to muster.init(runtime_env=...), which has Ray upload them for every worker.",
                      stacklevel=4)
    return None


# -- snapshots (the driver) ----------------------------------------------------------------------------------
def _files(source: str, excludes: list[str]) -> tuple[list[tuple[str, str, bool]], int]:
    """``(path, relative path, is_folder)`` of what to copy from the folder ``source``, and their bytes."""
    out: list[tuple[str, str, bool]] = []
    total = 0
    pending: list[tuple[str, str, list[tuple[str, IgnoreRules]]]] = [(source, "", [("", IgnoreRules(excludes))])]
    while pending:
        folder, rel, rules = pending.pop()
        rules = rules + [(rel, IgnoreRules(_read_lines(os.path.join(folder, name))))
                         for name in _IGNORE_FILES if os.path.isfile(os.path.join(folder, name))]
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            child = f"{rel}/{entry.name}" if rel else entry.name
            is_folder = entry.is_dir()
            if any(r.excludes(child[len(base) + 1:] if base else child, is_folder) for base, r in rules if r):
                continue
            out.append((entry.path, child, is_folder))
            if is_folder:
                pending.append((entry.path, child, rules))
            else:
                total += entry.stat().st_size
    return out, total


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def _session_root() -> str:
    global _root
    if _root is None or not os.path.isdir(_root):
        _root = tempfile.mkdtemp(prefix="muster-runtime-env-")
        from muster.core import api  # here: core imports this module

        api.on_shutdown(_forget)
    return _root


def _forget(_runtime: Any = None) -> None:
    """``muster.shutdown()``: drop this session's copies (the next session copies again)."""
    global _root
    with _lock:
        root, _root = _root, None
        _snapshots.clear()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def _too_big(source: str, total: int, key: str, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{what}: runtime_env['{key}'] {source!r} holds {total / 2**20:.2f} MiB to copy, over the limit of "
        f"{MAX_BYTES / 2**20:.2f} MiB (Ray's). Leave large files out with runtime_env['excludes'] (such as "
        "['*.ckpt', 'data/']) or a '.gitignore'/'.rayignore' file in the folder, or pass them by path instead.")


def snapshot(source: str, excludes: list[str], kind: str, what: str) -> str:
    """The ``sys.path`` entry of this session's copy of ``source`` (a folder; for ``py_modules`` also a ``.py``
    file), made now unless one with the same ``excludes`` exists: for ``working_dir`` the copy of the folder's
    contents, for ``py_modules`` the folder holding the copy of the folder or file."""
    source = os.path.realpath(source)
    key = (source, tuple(excludes), kind)
    with _lock:
        if key in _snapshots and os.path.isdir(_snapshots[key]):
            return _snapshots[key]
        name = f"{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:16]}"
        target = os.path.join(_session_root(), name)
        shutil.rmtree(target, ignore_errors=True)
        top = target if kind == "working_dir" else os.path.join(target, os.path.basename(source))
        if os.path.isfile(source):
            os.makedirs(target)
            shutil.copyfile(source, top)
        else:
            entries, total = _files(source, excludes)
            if total >= MAX_BYTES:
                raise _too_big(source, total, kind, what)
            os.makedirs(top)
            for path, rel, is_folder in entries:
                dest = os.path.join(top, rel)
                if is_folder:
                    os.makedirs(dest, exist_ok=True)
                else:
                    shutil.copy2(path, dest)
        _snapshots[key] = target
        return target


# -- applying them (the worker) ------------------------------------------------------------------------------
_job: LocalDirs | None = None  # what muster.init's runtime_env set in this worker


def job_setup(dirs: LocalDirs, user_hook: Any = None) -> None:
    """The worker setup hook ``muster.init`` installs for a local ``working_dir``/``py_modules``: apply
    ``dirs`` for the worker's whole life, then run the user's ``worker_process_setup_hook`` (a function or
    ``"module.function"``), if any."""
    global _job
    ray = sys.modules.get("ray")
    if not (ray is not None and ray.is_initialized()):  # a worker of the embedded engine (not of a Ray cluster)
        enter(dirs)
        _job = dirs
    if isinstance(user_hook, str):
        module, _, name = user_hook.rpartition(".")
        user_hook = getattr(importlib.import_module(module), name)
    if user_hook is not None:
        user_hook()


def enter(dirs: LocalDirs) -> None:
    """Apply ``dirs`` from now on (an actor's, for its life): its folders replace the job's it overrides."""
    _switch(dirs)


def _switch(dirs: LocalDirs) -> dict[str, types.ModuleType]:
    """Point the current directory and ``sys.path`` at ``dirs`` (over the job's); the modules imported from
    the job's folders it replaces, now hidden from ``import``."""
    replaced: list[str] = []
    if _job is not None:
        replaced += [_job.working_dir] if dirs.working_dir is not None and _job.working_dir else []
        replaced += list(_job.py_modules or ()) if dirs.py_modules is not None else []
    replaced = [p for p in replaced if p not in dirs.paths()]
    hidden = _modules_under(replaced)
    for name in hidden:
        sys.modules.pop(name, None)
    sys.path[:] = dirs.paths() + [p for p in sys.path if p not in replaced and p not in dirs.paths()]
    if dirs.working_dir is not None:
        os.chdir(dirs.working_dir)
    return hidden


def _modules_under(folders: list[str]) -> dict[str, types.ModuleType]:
    if not folders:
        return {}
    prefixes = tuple(os.path.join(f, "") for f in folders)
    return {name: m for name, m in list(sys.modules.items()) if str(getattr(m, "__file__", None)).startswith(prefixes)}


@contextlib.contextmanager
def applied(dirs: LocalDirs | None) -> Iterator[None]:
    """``dirs`` applied while a task runs, then the worker's directory, ``sys.path`` and imported modules as
    they were (the next task of this pooled worker may have another ``runtime_env``)."""
    if dirs is None:
        yield
        return
    cwd, path = os.getcwd(), list(sys.path)
    hidden = _switch(dirs)
    try:
        yield
    finally:
        for name in _modules_under([p for p in dirs.paths() if p not in (_job.paths() if _job else [])]):
            sys.modules.pop(name, None)
        sys.modules.update(hidden)
        sys.path[:] = path
        with contextlib.suppress(OSError):
            os.chdir(cwd)


def setup_hook_for(dirs: LocalDirs, user_hook: Any) -> Callable[[], None]:
    """The worker setup hook that applies ``dirs`` and then runs ``user_hook`` (a named function: Ray's
    ``ray.init`` exports the hook by its name, on an engine that runs on a Ray cluster)."""

    def apply_working_dir_then_user_hook() -> None:
        job_setup(dirs, user_hook)

    return apply_working_dir_then_user_hook

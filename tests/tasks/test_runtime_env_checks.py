"""A malformed ``runtime_env`` is refused where it is given, as Ray 2.60 refuses it; a well-formed ``pip`` or
URI ``working_dir`` is still taken with the warning that it has no effect here (a local folder is applied:
``test_runtime_env_working_dir.py``)."""

from __future__ import annotations

import pytest

import muster
from muster.core import api
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.runtime_env import RuntimeEnv


@muster.remote
def _checked_task():
    return 1


@muster.remote
class _CheckedActor:
    pass


def test_working_dir_that_does_not_exist_is_refused_at_options(tmp_path):
    # Ray 2.60: ValueError "/nonexistent/dir is not a valid path." at .options() and @ray.remote(...).
    missing = str(tmp_path / "missing")
    for make in (_checked_task.options, _CheckedActor.options, lambda **kw: muster.remote(**kw)(lambda: 1)):
        with pytest.raises(InvalidArgumentError, match=f"working_dir.*{missing!r} is not an existing directory"):
            make(runtime_env={"working_dir": missing})
    with pytest.raises(InvalidTypeError, match=r"working_dir'\]=5; give a directory's path"):
        _checked_task.options(runtime_env={"working_dir": 5})
    with pytest.warns(UserWarning, match="runtime_env working_dir has no effect"):  # a URI: not fetched
        _checked_task.options(runtime_env={"working_dir": "https://example.com/code.zip"})


def test_py_modules_that_is_no_list_or_names_no_module_is_refused_at_options(tmp_path):
    # Ray 2.60: TypeError "py_modules must be a List of local paths, imported modules, or URIs"; ValueError
    # "py_modules entry must be a .py file, a directory, or a .whl file".
    with pytest.raises(InvalidTypeError, match=r"py_modules'\]='pkg'; give a list"):
        _checked_task.options(runtime_env={"py_modules": "pkg"})
    missing = str(tmp_path / "missing")
    with pytest.raises(InvalidArgumentError, match=f"py_modules'\\] has {missing!r}, which is not an existing"):
        _CheckedActor.options(runtime_env={"py_modules": [missing]})


def test_pip_string_that_is_no_requirements_file_is_refused_naming_the_list_form(tmp_path):
    # Ray 2.60: ValueError "numpy is not a valid file"; it takes a list, a requirements file, {"packages": ...}.
    with pytest.raises(InvalidArgumentError, match=r"runtime_env\['pip'\]='numpy' is not a file.*\['numpy'\]"):
        _checked_task.options(runtime_env={"pip": "numpy"})
    with pytest.raises(InvalidArgumentError, match=r"\['pip'\]\['packages'\]='numpy' is not a file"):
        _CheckedActor.options(runtime_env={"pip": {"packages": "numpy"}})
    with pytest.raises(InvalidArgumentError, match="has no 'packages'"):
        _checked_task.options(runtime_env={"pip": {"pip_version": "==23.0"}})
    with pytest.raises(InvalidTypeError, match=r"runtime_env\['pip'\]=\('numpy',\); give a list"):
        _checked_task.options(runtime_env={"pip": ("numpy",)})
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy\n")
    with pytest.warns(UserWarning, match="runtime_env pip has no effect"):  # said once, at the first
        for pip in (["numpy"], str(requirements), {"packages": ["numpy"], "pip_check": False}):
            _CheckedActor.options(runtime_env={"pip": pip})
    with pytest.raises(InvalidArgumentError, match="RuntimeEnv.*'numpy' is not a file"):
        RuntimeEnv(pip="numpy")


def test_init_env_vars_that_are_not_strings_is_a_type_error_naming_the_str_form(monkeypatch):
    # Ray 2.60: TypeError "runtime_env['env_vars'] must be of type Dict[str, str], but the value 1 is ...".
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(InvalidTypeError, match=r"muster.init\(\).*has \{'FOO': 1\}.*write \{'FOO': '1'\}"):
        muster.init(runtime_env={"env_vars": {"FOO": 1}})
    assert api._runtime is None

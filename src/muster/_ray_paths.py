"""Ray's deeper module paths, served by the muster module that holds their names.

Ray's docs import from the module that defines a class (``from ray.tune.stopper.maximum_iteration import
MaximumIterationStopper``); muster keeps such names in the package above (``muster.tune.stopper``).  Each path in
:data:`ALIASES` imports as a small module whose attributes are the target module's, the same objects, so
``from muster.tune.stopper.maximum_iteration import MaximumIterationStopper`` works after changing ``ray`` to
``muster``.  A name the target lacks is looked up in :mod:`muster._unsupported` under the alias's own path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError


def _under(package: str, *modules: str) -> dict[str, str]:
    return {f"{package}.{module}": package for module in modules}


#: Ray module path (as muster.*) -> the muster module holding its public names
ALIASES: dict[str, str] = {
    **_under("muster.tune.stopper", "experiment_plateau", "function_stopper", "maximum_iteration", "noop", "stopper",
             "timeout", "trial_plateau"),
    **_under("muster.tune.logger", "csv", "json", "logger", "tensorboardx"),
    "muster.tune.logger.mlflow": "muster.air.integrations.mlflow",
    **_under("muster.tune.schedulers", "median_stopping_rule"),
    **_under("muster.tune.search", "concurrency_limiter", "search_generator"),
    **_under("muster.tune.search.optuna", "optuna_search"),
    **_under("muster.tune.trainable", "trainable", "function_trainable"),
    **_under("muster.tune.utils", "util"),
    **_under("muster.tune", "tune", "context", "error", "trainable.util", "trainable.trainable_fn_utils", "impl",
             "impl.config"),
    **_under("muster.train.torch", "torch_trainer"),
    **_under("muster.train", "base_trainer"),
    **_under("muster.air", "result"),
    **_under("muster.data", "read_api", "grouped_data"),
    "muster.runtime_context": "muster.tasks.runtime_context",  # get_runtime_context, RuntimeContext
    **_under("muster.data.datasource", "file_based_datasource", "file_datasink", "filename_provider",
             "partitioning"),
}


class _AliasModule(ModuleType):
    """A Ray path whose attributes are its target module's (the same objects)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        from muster._unsupported import UNSUPPORTED, raise_unsupported

        if name in UNSUPPORTED.get(self.__name__, {}):
            raise_unsupported(self.__name__, name)
        target = importlib.import_module(ALIASES[self.__name__])
        try:
            return getattr(target, name)  # the target's own __getattr__ names what muster lacks there
        except (UnsupportedRayAPIError, UnsupportedRayImportError):
            raise
        except AttributeError:
            raise_unsupported(self.__name__, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(importlib.import_module(ALIASES[self.__name__]))))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # by name, as pickle takes a plain module: cloudpickle saves the submodules a function's code names
        # (``tune.stopper`` once ``muster.tune.stopper.x`` was imported), and knows only ModuleType itself
        return importlib.import_module, (self.__name__,)


class RayPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """On ``sys.meta_path``: imports a path in :data:`ALIASES` as an alias of its target module."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in ALIASES:
            return None
        is_package = any(other.startswith(fullname + ".") for other in ALIASES)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _AliasModule(spec.name, f"Ray's ray{spec.name.removeprefix('muster')}: the names of "
                                       f"{ALIASES[spec.name]}.")

    def exec_module(self, module: ModuleType) -> None:
        importlib.import_module(ALIASES[module.__name__])  # its import errors surface here, at the import


def install_ray_path_finder() -> None:
    if not any(isinstance(f, RayPathFinder) for f in sys.meta_path):
        sys.meta_path.append(RayPathFinder())

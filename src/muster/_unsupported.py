"""Ray names muster knows and does not provide, with the nearest muster equivalent.

Each public package's module ``__getattr__`` asks :func:`raise_unsupported`,
so a ported script fails with an error that names the API and what to use
instead (the porting guide, docs/porting.md, lists the same by Ray module).
"""

from __future__ import annotations

import dis
import sys
from types import FrameType
from typing import NoReturn

from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError

_GUIDE = "See docs/porting.md for what is supported."

#: module -> {Ray name: nearest muster equivalent}
UNSUPPORTED: dict[str, dict[str, str]] = {
    "muster": {
        "timeline": "the run store: `muster runs` and the dashboard (`muster dashboard`)",
        "java_function": "Python tasks only: @muster.remote on a Python function",
        "java_actor_class": "Python actors only: @muster.remote on a Python class",
        "cpp_function": "Python tasks only: @muster.remote on a Python function",
        "client": "muster.init(address='ray://<head>:10001') to run on a Ray cluster",
        "workflow": "Tune/Train checkpoints (muster.train.Checkpoint) for durable progress",
        "dag": "plain task composition: pass ObjectRefs from one .remote() call to the next",
        "experimental": "no muster equivalent (Ray's experimental APIs are not ported)",
        "rllib": "no muster equivalent; run RLlib on Ray itself",
        "autoscaler": "a Ray cluster's autoscaler, through muster.init(address=...)",
        "job_submission": "run the script itself (python script.py); on a cluster, muster.init(address=...)",
        "get_dashboard_url": "`muster dashboard` (the run store's dashboard)",
    },
    "muster.util": {
        "inspect_serializability": "muster.put(value): it raises a TypeError naming what cannot be serialized",
        "collective": "torch.distributed inside a TorchTrainer (muster.train.torch.TorchTrainer)",
        "multiprocessing": "muster.util.ActorPool, or tasks with muster.remote",
        "dask": "no muster equivalent",
        "spark": "no muster equivalent",
        "state": "muster.util.list_named_actors() and muster.cluster_resources()",
        "metrics": "muster.train.report()/muster.tune.report() metrics, kept in the run store",
        "tracing": "no muster equivalent",
        "annotations": "no muster equivalent",
    },
    "muster.train": {
        "ValidationConfig": "validate in train_loop_per_worker and report the metrics with muster.train.report",
        "LoggingConfig": "muster.init(logging_level=...) and RunConfig(verbose=...)",
        "SyncConfig": "RunConfig(storage_path=...): checkpoints are written to storage directly",
        "BackendConfig": "TorchTrainer(torch_config=muster.train.torch.TorchConfig(...))",
    },
    "muster.train.huggingface": {
        "TransformersTrainer": "TorchTrainer, with muster.train.huggingface.transformers.prepare_trainer(trainer) "
        "on the transformers.Trainer inside train_loop_per_worker (as Ray's own guide now does)",
    },
    "muster.tune": {
        "run": "muster.tune.Tuner(trainable, param_space=..., tune_config=..., run_config=...).fit()",
        "run_experiments": "muster.tune.Tuner(...).fit()",
        "Experiment": "muster.tune.Tuner(...)",
        "SyncConfig": "muster.train.RunConfig(storage_path=...): storage is written directly",
        "CLIReporter": "the console table muster.tune prints (RunConfig(verbose=...))",
        "JupyterNotebookReporter": "the console table muster.tune prints (RunConfig(verbose=...))",
        "ProgressReporter": "the console table muster.tune prints (RunConfig(verbose=...))",
        "register_trainable": "pass the function or Trainable class to muster.tune.Tuner directly",
        "register_env": "no muster equivalent (RLlib environments)",
    },
}


def raise_unsupported(module: str, name: str) -> NoReturn:
    """Raise the error for ``module.name``: unsupported (with its equivalent) or simply unknown."""
    nearest = UNSUPPORTED.get(module, {}).get(name)
    if nearest is not None:
        message = (
            f"{module}.{name} (Ray's ray{module.removeprefix('muster')}.{name}) is not supported by muster; "
            f"nearest equivalent: {nearest}. {_GUIDE}"
        )
        if _from_import():
            raise UnsupportedRayImportError(message, name=name)
        raise UnsupportedRayAPIError(message)
    raise AttributeError(f"module {module!r} has no attribute {name!r}. {_GUIDE}")


def _from_import() -> bool:
    """Whether a ``from module import name`` statement is looking the name up."""
    frame: FrameType | None = sys._getframe(2)  # this <- raise_unsupported <- the module's __getattr__
    while frame is not None and frame.f_code.co_name == "__getattr__":
        frame = frame.f_back
    if frame is None:
        return False
    at = frame.f_lasti
    return any(i.offset == at and i.opname == "IMPORT_FROM" for i in dis.get_instructions(frame.f_code))

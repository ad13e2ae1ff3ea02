"""muster.tune: Ray Tune's API (``ray.tune`` -> ``muster.tune``).

``Tuner(trainable, param_space=..., tune_config=TuneConfig(...), run_config=RunConfig(...)).fit()``
runs trials on the same engine as training; inside a function trainable call
``tune.report``, ``tune.get_checkpoint`` and ``tune.get_context``.
"""

from muster.train.checkpoint import Checkpoint
from muster.tune.run_config import FailureConfig, RunConfig
from muster.exceptions import MusterError as TuneError  # Ray's base error of ray.tune: muster's base error
from muster.train._internal.result_base import Result
from muster.tune import analysis, logger, schedulers, search
from muster.tune.analysis import ExperimentAnalysis
from muster.tune.callback import Callback
from muster.tune.progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter
from muster.tune.result_grid import ResultGrid, TrialError
from muster.tune.schedulers import create_scheduler
from muster.tune.search import create_searcher
from muster.tune.search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qloguniform,
    qlograndint,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from muster.tune.session import TuneContext, get_checkpoint, get_context, report
from muster.tune.stopper import MaximumIterationStopper, Stopper
from muster.tune.tune_config import (
    CheckpointConfig,
    PlacementGroupFactory,
    ResumeConfig,
    TuneConfig,
    with_parameters,
    with_resources,
)
from muster.tune.trainable import Trainable
from muster.tune.tuner import Tuner
from muster.tune.tune_run import run, run_experiments
from muster.tune.experiment import Experiment


def __getattr__(name: str) -> object:
    if name == "integration":
        import importlib

        return importlib.import_module("muster.tune.integration")
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune", name)


__all__ = [
    "analysis",
    "CLIReporter",
    "Callback",
    "JupyterNotebookReporter",
    "ProgressReporter",
    "Checkpoint",
    "Experiment",
    "ExperimentAnalysis",
    "CheckpointConfig",
    "FailureConfig",
    "MaximumIterationStopper",
    "PlacementGroupFactory",
    "ResumeConfig",
    "Result",
    "ResultGrid",
    "RunConfig",
    "Stopper",
    "Trainable",
    "TrialError",
    "TuneConfig",
    "TuneError",
    "TuneContext",
    "Tuner",
    "choice",
    "create_scheduler",
    "create_searcher",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "logger",
    "lograndint",
    "loguniform",
    "qloguniform",
    "qlograndint",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "schedulers",
    "search",
    "uniform",
    "with_parameters",
    "with_resources",
]

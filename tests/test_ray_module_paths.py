"""Ray's deeper module paths (the ones its docs and examples import from) work after ``ray`` -> ``muster``."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import yaml

from muster.exceptions import UnsupportedRayImportError

# (Ray's module, a name it exports, where muster keeps that object)
RAY_PATHS = [
    ("ray.tune.stopper.maximum_iteration", "MaximumIterationStopper", "muster.tune.stopper"),
    ("ray.tune.stopper.stopper", "CombinedStopper", "muster.tune.stopper"),
    ("ray.tune.stopper.trial_plateau", "TrialPlateauStopper", "muster.tune.stopper"),
    ("ray.tune.stopper.timeout", "TimeoutStopper", "muster.tune.stopper"),
    ("ray.tune.stopper.experiment_plateau", "ExperimentPlateauStopper", "muster.tune.stopper"),
    ("ray.tune.logger.csv", "CSVLoggerCallback", "muster.tune.logger"),
    ("ray.tune.logger.logger", "LoggerCallback", "muster.tune.logger"),
    ("ray.tune.logger.tensorboardx", "TBXLoggerCallback", "muster.tune.logger"),
    ("ray.tune.logger.mlflow", "MLflowLoggerCallback", "muster.air.integrations.mlflow"),
    ("ray.tune.search.concurrency_limiter", "ConcurrencyLimiter", "muster.tune.search"),
    ("ray.tune.search.search_generator", "SearchGenerator", "muster.tune.search"),
    ("ray.tune.search.search_algorithm", "SearchAlgorithm", "muster.tune.search"),
    ("ray.tune.trainable.function_trainable", "wrap_function", "muster.tune.trainable"),
    ("ray.tune.trainable.function_trainable", "FunctionTrainable", "muster.tune.trainable"),
    ("ray.tune.search.optuna.optuna_search", "OptunaSearch", "muster.tune.search.optuna"),
    ("ray.tune.schedulers.median_stopping_rule", "MedianStoppingRule", "muster.tune.schedulers"),
    ("ray.tune.schedulers.async_hyperband", "ASHAScheduler", "muster.tune.schedulers"),
    ("ray.tune.trainable.trainable", "Trainable", "muster.tune"),
    ("ray.tune.trainable.util", "with_parameters", "muster.tune"),
    ("ray.tune.tune", "run", "muster.tune"),
    ("ray.tune.context", "get_context", "muster.tune"),
    ("ray.tune.error", "TuneError", "muster.tune"),
    ("ray.tune.impl.config", "RunConfig", "muster.tune"),
    ("ray.train.torch.torch_trainer", "TorchTrainer", "muster.train.torch"),
    ("ray.train.base_trainer", "TrainingFailedError", "muster.train"),
    ("ray.air.result", "Result", "muster.air"),
    ("ray.data.read_api", "read_parquet", "muster.data"),
    ("ray.data.read_api", "read_sql", "muster.data"),
    ("ray.data.grouped_data", "GroupedData", "muster.data"),
    ("ray.data.datasource.file_based_datasource", "FileBasedDatasource", "muster.data.datasource"),
    ("ray.data.datasource.filename_provider", "FilenameProvider", "muster.data.datasource"),
    ("ray.serve.handle", "DeploymentHandle", "muster.serve"),
    ("ray.runtime_context", "get_runtime_context", "muster"),
    ("ray.runtime_context", "RuntimeContext", "muster.tasks.runtime_context"),
    ("ray.train", "ValidationFn", "muster.train.validation"),
    ("ray.data", "Preprocessor", "muster.data.preprocessors"),
]


@pytest.mark.parametrize(("ray_module", "name", "home"), RAY_PATHS, ids=[row[0] for row in RAY_PATHS])
def test_ray_module_path_imports_the_same_object(ray_module, name, home):
    module = importlib.import_module("muster" + ray_module.removeprefix("ray"))
    assert getattr(module, name) is getattr(importlib.import_module(home), name)
    assert name in dir(module)


def test_former_module_files_still_import_as_before():
    from muster.tune.logger import CSVLoggerCallback, LoggerCallback
    from muster.tune.stopper import MaximumIterationStopper, Stopper
    from muster.tune.trainable import Trainable

    assert issubclass(MaximumIterationStopper, Stopper) and issubclass(CSVLoggerCallback, object)
    assert LoggerCallback.__module__ == "muster.tune.logger" and Trainable.__module__ == "muster.tune.trainable"


@pytest.mark.parametrize(("statement", "says"), [
    ("from muster.tune.logger.aim import AimLoggerCallback", "LoggerCallback"),
    ("from muster.tune.logger.wandb import WandbLoggerCallback", "MLflowLoggerCallback"),
    ("from muster.train.torch.xla import TorchXLAConfig", "no TPU/XLA"),
    ("from muster.tune.syncer import SyncConfig", "storage_path"),
    ("from muster.data.read_api import read_orc", "pyarrow.orc"),  # the target package's own entry
    ("from muster.train import LoggingConfig", "logging_level"),
    ("from muster.train.data_parallel_trainer import DataParallelTrainer", "v2.api.data_parallel_trainer"),
    ("import muster.train.constants", "storage_path"),  # plain ModuleNotFoundErrors before
    ("from muster.train.utils import _log_deprecation_warning", "internal helpers"),
    ("from muster.train.base_trainer import BaseTrainer", "TorchTrainer"),
    # Ray 2.60 names its docs use that muster lacks: each names what to use (a bare AttributeError before)
    ("from muster import LoggingConfig", "worker_process_setup_hook"),
    ("from muster.util import pdb", "no remote debugger"),
    ("from muster.train import NCCLHangError", "stall_report_s"),
    ("from muster.train.lightning import RayDeepSpeedStrategy", "RayFSDPStrategy"),
    ("from muster.data import read_orc", "pyarrow.orc"),
    ("from muster.data import read_videos", "read_binary_files"),
    ("from muster.data import read_audio", "read_binary_files"),
    ("from muster.data import read_avro", "fastavro"),
    ("from muster.data import from_daft", "to_arrow"),
    ("from muster.tune.utils import merge_dicts", "dict merge"),
    ("from muster.tune.examples.mnist_pytorch import ConvNet", "pbt_function"),  # a bare ModuleNotFoundError before
    ("from muster.train.examples.pytorch.torch_fashion_mnist_example import train_func", "torch_linear_example"),
])
def test_ray_paths_muster_lacks_name_what_to_use(statement, says):
    with pytest.raises(UnsupportedRayImportError, match="nearest equivalent") as info:
        exec(statement, {})
    assert says in str(info.value)


def test_pretty_print_shows_a_result_as_yaml_without_config():
    from muster.tune.logger.logger import pretty_print

    result = {"loss": np.float32(0.5), "training_iteration": np.int64(3), "weights": np.arange(3),
              "config": {"lr": 0.1}, "hist_stats": [1, 2], "unset": None, "skipped": 1, "what": object}
    text = pretty_print(result, exclude={"skipped"})
    assert yaml.safe_load(text) == {"loss": 0.5, "training_iteration": 3, "weights": [0, 1, 2],
                                    "what": "<class 'object'>"}
    assert "config" in result  # the caller's dict is left as it was


def test_an_alias_module_pickles_by_name_as_a_module_does():
    """cloudpickle saves the imported submodules that a function's code names; an alias module among them
    failed every Tuner.fit() (its trainable is pickled) once a Ray path had been imported."""
    import pickle

    import cloudpickle

    from muster import tune

    alias = importlib.import_module("muster.tune.stopper.maximum_iteration")
    assert pickle.loads(pickle.dumps(alias)) is alias

    def trainable(config):
        return tune.stopper.maximum_iteration.MaximumIterationStopper  # names the alias submodule

    assert cloudpickle.loads(cloudpickle.dumps(trainable))(None) is tune.stopper.MaximumIterationStopper

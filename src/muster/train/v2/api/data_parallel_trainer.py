"""``ray.train.v2.api.data_parallel_trainer``: the framework-free trainer (``TorchTrainer`` is one)."""

from muster.train.trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]

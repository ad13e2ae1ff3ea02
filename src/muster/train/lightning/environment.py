"""``MusterLightningEnvironment``: Lightning's cluster environment inside a muster worker."""

from __future__ import annotations

import os

from lightning.fabric.plugins.environments import LightningEnvironment

import muster.train as train


class MusterLightningEnvironment(LightningEnvironment):
    """Gives Lightning the ranks muster assigned (Ray's ``RayLightningEnvironment``).

    muster starts the workers and joins them into the process group before
    ``train_loop_per_worker`` runs, so Lightning must neither launch processes
    nor renumber them: ranks and world size come from
    ``muster.train.get_context()``, Lightning's attempts to set them are
    ignored, and the strategy finds the process group already initialized.
    """

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", 0))

    def world_size(self) -> int:
        return train.get_context().get_world_size()

    def global_rank(self) -> int:
        return train.get_context().get_world_rank()

    def local_rank(self) -> int:
        return train.get_context().get_local_rank()

    def node_rank(self) -> int:
        return train.get_context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        """Ignored: muster decides the world size (``ScalingConfig.num_workers``)."""

    def set_global_rank(self, rank: int) -> None:
        """Ignored: muster decides the ranks."""

    def teardown(self) -> None:
        """Keep WORLD_SIZE and the other variables muster set for this worker."""

"""Ray's ``ray.tune.utils.mock_trainable``: the toy class trainable Ray's ``hyperband_example`` runs.

Its reward is a sigmoid of the step: ``tanh(step / width) * height`` (``width`` and ``height`` from
the config, 1 when absent), reported as ``episode_reward_mean``. ``config["sleep"]`` seconds pass in
each step; with ``config["mock_error"]`` it fails after its first step until it was restored from a
checkpoint (every step with ``config["persistent_error"]``), for fault-tolerance demos.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from muster.tune.trainable import Trainable

__all__ = ["MOCK_ERROR_KEY", "MOCK_TRAINABLE_NAME", "MyTrainableClass"]

MOCK_TRAINABLE_NAME = "mock_trainable"
MOCK_ERROR_KEY = "mock_error"
_STATE_FILE = "checkpoint"


class MyTrainableClass(Trainable):
    """A trainable whose learning curve is ``tanh(step / width) * height``."""

    def setup(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.timestep, self.restored = 0, False
        self._sleep = float(config.get("sleep", 0))
        self._fail, self._fail_always = bool(config.get(MOCK_ERROR_KEY)), bool(config.get("persistent_error"))

    def step(self) -> dict[str, Any]:
        if self._fail and self.timestep > 0 and (self._fail_always or not self.restored):
            raise RuntimeError(f"MyTrainableClass fails on purpose ({MOCK_ERROR_KEY}=True) at step {self.timestep}")
        if self._sleep > 0:
            time.sleep(self._sleep)
        self.timestep += 1
        reward = np.tanh(self.timestep / self.config.get("width", 1)) * self.config.get("height", 1)
        return {"episode_reward_mean": float(reward)}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, _STATE_FILE), "w") as f:
            json.dump({"timestep": self.timestep}, f)

    def load_checkpoint(self, checkpoint: dict[str, Any] | str) -> None:
        with open(os.path.join(str(checkpoint), _STATE_FILE)) as f:
            self.timestep = json.load(f)["timestep"]
        self.restored = True


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.utils.mock_trainable", name)

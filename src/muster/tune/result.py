"""The names of the keys a trial's results carry, as constants (Ray's ``ray.tune.result``).

Tune fills the automatic ones into every reported result (``training_iteration``,
``time_total_s``, ``trial_id``, ...); ``DONE`` and ``SHOULD_CHECKPOINT`` are read back: a
class trainable's ``step()`` returning ``{DONE: True}`` ends its trial, and a result carrying
``{SHOULD_CHECKPOINT: True}`` (set by the trainable or by a ``Callback.on_trial_result``) is
checkpointed whatever the checkpoint frequency. The rest name metrics by convention.
"""

from __future__ import annotations

# read back by Tune
DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"

# filled into every result
TRAINING_ITERATION = "training_iteration"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TIMESTAMP = "timestamp"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
HOSTNAME = "hostname"
NODE_IP = "node_ip"
PID = "pid"
CONFIG_PREFIX = "config"  # ResultGrid.get_dataframe() names a config's columns config/<key>

# metric names by convention
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"

__all__ = [
    "CONFIG_PREFIX", "DONE", "EPISODES_THIS_ITER", "EPISODES_TOTAL", "EPISODE_REWARD_MEAN", "EXPERIMENT_TAG",
    "HOSTNAME", "MEAN_ACCURACY", "MEAN_LOSS", "NODE_IP", "PID", "SHOULD_CHECKPOINT", "TIMESTAMP",
    "TIMESTEPS_THIS_ITER", "TIMESTEPS_TOTAL", "TIME_THIS_ITER_S", "TIME_TOTAL_S", "TRAINING_ITERATION",
    "TRIAL_ID",
]

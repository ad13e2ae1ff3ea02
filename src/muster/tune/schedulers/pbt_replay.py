"""Replay one trial's schedule of configs from a population-based training run.

PBT (or PB2) with ``log_config=True`` writes ``pbt_policy_<trial_id>.txt`` in
the experiment's folder: one JSON line per exploit in the trial's lineage,
``[trial's tag, donor's tag, trial's iteration, donor's iteration, donor's
config, new config]``. Read from its last line back along the chain of donors,
it is a schedule: the config the lineage began with, then, at each donor
iteration, the config it went on with. :class:`PopulationBasedTrainingReplay`
trains one trial on that schedule.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from muster.exceptions import InvalidArgumentError
from muster.tune.schedulers.trial_scheduler import FIFOScheduler
from muster.tune.search.variant_generator import format_vars

if TYPE_CHECKING:
    from muster.tune.trial import Trial

_log = logging.getLogger(__name__)


def read_policy(policy_file: str) -> tuple[dict[str, Any] | None, list[tuple[int, dict[str, Any]]]]:
    """The config a PBT policy log's lineage starts with, and its changes ``(iteration, new config)``.

    Walking back from the last line, each line's donor must be the trial the line before it
    exploited; where the chain breaks, what came before was overwritten by a later exploit and is
    left out (as Ray reads it).

    Raises:
        InvalidArgumentError: the file is missing, or a line is not a policy line.
    """
    try:
        with open(policy_file) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"PopulationBasedTrainingReplay({policy_file!r}): no such policy file. PBT writes "
            "pbt_policy_<trial_id>.txt in the experiment's folder when run with log_config=True."
        ) from None
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, list) or len(row) != 6:
            raise InvalidArgumentError(
                f"PopulationBasedTrainingReplay({policy_file!r}): line {number} is not a PBT policy line "
                f"([tag, donor's tag, iteration, donor's iteration, donor's config, new config]): {line[:200]!r}."
            )
        rows.append(row)
    changes: list[tuple[int, dict[str, Any]]] = []
    start: dict[str, Any] | None = None
    donor_tag = None
    for tag, new_donor_tag, _, donor_step, donor_config, new_config in reversed(rows):
        if donor_tag is not None and tag != donor_tag:
            break
        donor_tag, start = new_donor_tag, donor_config
        changes.append((int(donor_step), new_config))
    return start, changes[::-1]


class PopulationBasedTrainingReplay(FIFOScheduler):
    """Trains one trial on the schedule of configs a PBT run found for one of its trials.

    The trial starts with the config the logged lineage began with and, once it reports the
    ``training_iteration`` of each logged exploit, is paused and restarted from its own latest
    checkpoint with the config that exploit chose (so report checkpoints, as for PBT). Run it with
    ``num_samples=1`` and a ``stop`` condition; a ``param_space`` is replaced by the logged config.

    Args:
        policy_file: ``pbt_policy_<trial_id>.txt`` from the PBT experiment's folder (written with
            ``log_config=True``, the default).

    Raises:
        InvalidArgumentError: no such file, or one that is not a PBT policy log; (when the Tuner adds
            trials) a second trial, or no policy and no config to train with.
    """

    def __init__(self, policy_file: str):
        super().__init__()
        self.policy_file = os.path.expanduser(str(policy_file))
        start, self._policy = read_policy(self.policy_file)
        self.config: dict[str, Any] = start or {}
        self.current_config = self.config
        self.experiment_tag = f"replay_{os.path.basename(self.policy_file)}"
        self._trial: Trial | None = None
        self._next = 0  # the index of the next change in self._policy
        self._current_step = 0
        self._num_perturbations = 0
        self._warned = False

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        if self._trial is not None and self._trial.trial_id != trial.trial_id:
            raise InvalidArgumentError(
                f"PopulationBasedTrainingReplay({self.policy_file!r}) replays one trial's schedule, but a second "
                f"trial ({trial.trial_id}) was added: set TuneConfig(num_samples=1) and a param_space without "
                "grid_search."
            )
        self._trial = trial
        if trial.num_results:  # restored (Tuner.restore): its config is where the replay had got to
            return
        if trial.config and self._policy:
            _log.warning("PopulationBasedTrainingReplay: the trial's config %s is replaced by the replayed one %s; "
                         "leave param_space out.", trial.config, self.config)
        elif trial.config:
            self.config = trial.config  # no change logged: train with the config given
        elif not self._policy:
            raise InvalidArgumentError(
                f"PopulationBasedTrainingReplay({self.policy_file!r}): the policy file has no exploit to replay "
                "and the trial has no config; pass a param_space, or train without the replay scheduler."
            )
        trial.config = copy.deepcopy(self.config)

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        step = result.get("training_iteration")
        if not isinstance(step, int) or self._next >= len(self._policy):
            return self.CONTINUE
        self._current_step = step
        change_at, new_config = self._policy[self._next]
        if step < change_at:
            return self.CONTINUE
        if controller.latest_checkpoint(trial) is None and not self._warned:
            self._warned = True
            _log.warning("PopulationBasedTrainingReplay: trial %s has no checkpoint at training_iteration=%s, so it "
                         "restarts from scratch with the next config; report checkpoints with tune.report(metrics, "
                         "checkpoint=...).", trial.trial_id, step)
        _log.info("PopulationBasedTrainingReplay: at training_iteration=%s the config changes to %s", step, new_config)
        # restart from its own latest checkpoint (None: the run's own), with the logged config
        trial.restart_plan = (copy.deepcopy(new_config), None, trial.trial_id)
        values = {(key,): value for key, value in new_config.items()}
        trial.experiment_tag = f"{self.experiment_tag}@perturbed[{format_vars(values)}]"
        self.current_config = new_config
        self._num_perturbations += 1
        self._next += 1
        return self.PAUSE

    def debug_string(self) -> str:
        return f"PopulationBasedTraining replay: Step {self._current_step}, perturb {self._num_perturbations}"

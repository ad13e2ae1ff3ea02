"""Population-based training (Jaderberg et al., 2017).

Every ``perturbation_interval`` (in ``time_attr`` units) a trial is ranked
against the population.  A trial in the bottom ``quantile_fraction``
*exploits*: it is stopped and restarted from the latest checkpoint of a
trial in the top quantile, with that trial's config *explored* -- each
mutated hyperparameter resampled (with ``resample_probability``) or nudged
(continuous values times one of ``perturbation_factors``; list values to a
neighbour).  Trials must report checkpoints for this to work.
"""

from __future__ import annotations

import copy
import json
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.schedulers.trial_scheduler import PendingConfig, TrialScheduler
from muster.tune.search.sample import Categorical, Domain
from muster.tune.search.variant_generator import format_vars

if TYPE_CHECKING:
    from muster.train.storage import Storage
    from muster.tune.trial import Trial

GLOBAL_LOG = "pbt_global.txt"  # Ray's: every exploit of the experiment, one JSON line each


def policy_log(trial_id: str) -> str:
    """Ray's name of a trial's policy log: the exploits that made its current config."""
    return f"pbt_policy_{trial_id}.txt"


@dataclass
class _State:
    last_score: float | None = None
    last_perturbed: float = 0.0
    orig_tag: str = ""  # the trial's experiment_tag before any exploit


class PopulationBasedTraining(TrialScheduler):
    """Args:
        time_attr: the result field that measures progress.
        metric / mode: what to optimise (or set them on TuneConfig).
        perturbation_interval: how often (in ``time_attr``) a trial is ranked.
        burn_in_period: no ranking before this much ``time_attr``.
        hyperparam_mutations: ``{key: domain | list | function | nested dict}``.
        quantile_fraction: the top and bottom fraction compared (<= 0.5).
        resample_probability: chance of redrawing a value instead of nudging it.
        perturbation_factors: what a continuous value is multiplied by.
        custom_explore_fn: ``config -> config``, applied after the mutations.
        log_config: on each exploit, append Ray's policy line ``[trial's tag, donor's tag, trial's
            training_iteration, donor's training_iteration, donor's config, new config]`` (JSON) to
            ``pbt_global.txt`` in the experiment's folder, and write ``pbt_policy_<trial_id>.txt``
            there: the donor's policy lines (its lineage) and this one.
        require_attrs: refuse a result without ``time_attr`` or the metric (else it is skipped).
        seed: for reproducible exploration.
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: dict[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
    ):
        super().__init__(metric, mode)
        if not hyperparam_mutations and custom_explore_fn is None:
            raise InvalidArgumentError(
                "PopulationBasedTraining needs hyperparam_mutations (e.g. {'lr': tune.loguniform(1e-4, 1e-1)}) "
                "or a custom_explore_fn to explore new configs."
            )
        if not 0 < quantile_fraction <= 0.5:
            raise InvalidArgumentError(
                f"{type(self).__name__}(quantile_fraction={quantile_fraction!r}): use 0 < q <= 0.5."
            )
        if not perturbation_interval > 0:
            raise InvalidArgumentError(
                f"{type(self).__name__}(perturbation_interval={perturbation_interval!r}): use a number > 0."
            )
        if synch:
            raise InvalidArgumentError(
                f"{type(self).__name__}(synch=True) is not supported in muster; the asynchronous version "
                "(synch=False) is, and it keeps every worker busy."
            )
        if hyperparam_mutations is not None:
            _check_mutations(type(self).__name__, hyperparam_mutations, ())
        self.time_attr, self.interval, self.burn_in = time_attr, perturbation_interval, burn_in_period
        self.mutations = hyperparam_mutations or {}
        self.quantile_fraction, self.resample_probability = quantile_fraction, resample_probability
        self.factors, self.explore_fn, self.require_attrs = perturbation_factors, custom_explore_fn, require_attrs
        self.log_config = log_config
        self.rng = random.Random(seed)
        self._state: dict[str, _State] = {}
        self.num_perturbations = 0
        self._warned = False

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        state = self._state.setdefault(trial.trial_id, _State())
        state.orig_tag = trial.experiment_tag.split("@perturbed[")[0]  # a restored trial's, too
        self._fill(trial.config, self.mutations)  # as Ray: the mutations may be the only search space

    def _fill(self, config: dict[str, Any], mutations: dict[str, Any]) -> None:
        """Draw each key of ``mutations`` that ``config`` lacks from its mutation's values."""
        for key, spec in mutations.items():
            if isinstance(spec, dict):
                if isinstance(config.setdefault(key, {}), dict):
                    self._fill(config[key], spec)
            elif key not in config:
                if isinstance(spec, (list, tuple)) or isinstance(spec, Categorical):
                    config[key] = self.rng.choice(list(spec.categories if isinstance(spec, Categorical) else spec))
                else:
                    config[key] = spec.draw(self.rng, config) if isinstance(spec, Domain) else spec()

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        self._require_metric()
        t, score = result.get(self.time_attr), self._score(result)
        if not isinstance(t, (int, float)) or score is None:
            if self.require_attrs:
                bad = [f"{name!r} ({'not reported' if name not in result else f'{result[name]!r}'})"
                       for name, ok in ((self.time_attr, isinstance(t, (int, float))), (self.metric, score is not None))
                       if not ok]
                raise InvalidArgumentError(
                    f"{type(self).__name__}: trial {trial.trial_id} has no number for {' or '.join(bad)}; every "
                    f"result needs {self.time_attr!r} and {self.metric!r} as numbers. Report them, or pass "
                    "require_attrs=False to skip such results."
                )
            return self.CONTINUE
        state = self._state.setdefault(trial.trial_id, _State())
        state.last_score = score
        if t < self.burn_in or t - state.last_perturbed < self.interval:
            return self.CONTINUE
        state.last_perturbed = t
        self._record(trial, t, score)
        lower, upper = self._quantiles(controller)
        if trial.trial_id not in {x.trial_id for x in lower}:
            return self.CONTINUE
        donors = [d for d in upper if controller.latest_checkpoint(d) is not None]
        if not donors:
            # At a first perturbation the top trials' checkpoints may still be on their way (Ray logs
            # this at info level). From the second on, no checkpoint anywhere means none is reported.
            late = t >= self.burn_in + 2 * self.interval
            if late and not self._warned and not any(controller.latest_checkpoint(x) is not None
                                                     for x in controller.live_trials()):
                warnings.warn(
                    f"{type(self).__name__}: no trial has a checkpoint to clone at {self.time_attr}={t}; report "
                    f"one with tune.report(metrics, checkpoint=...) at least every perturbation_interval="
                    f"{self.interval} for {type(self).__name__} to exploit.",
                    stacklevel=2,
                )
                self._warned = True
            return self.CONTINUE
        donor = self.rng.choice(donors)
        start_from = controller.clone_latest_checkpoint(donor, trial)  # the donor's run may delete its own
        if start_from is None:
            return self.CONTINUE
        new_config = self._new_config(trial, donor)
        policy = self._policy(trial, donor)  # as things are now: a PendingConfig is settled later

        def explored(config: dict[str, Any]) -> dict[str, Any]:
            if self.log_config:
                self._write_policy(controller.experiment, trial.trial_id, donor.trial_id, policy + [config])
            # as Ray's: the original tag and the new values of the mutated keys, e.g. "0_lr=0.0100@perturbed[lr=0.0120]"
            values = {(k,): config[k] for k in self.mutations if k in config}
            trial.experiment_tag = f"{state.orig_tag}@perturbed[{format_vars(values)}]"
            return config

        plan = new_config.then(explored) if isinstance(new_config, PendingConfig) else explored(new_config)
        trial.restart_plan = (plan, start_from, donor.trial_id)
        # as Ray's: the trial goes on from the donor checkpoint's training_iteration, so it takes the
        # donor's last perturbation time too
        state.last_perturbed = self._state.get(donor.trial_id, _State()).last_perturbed
        self.num_perturbations += 1
        return self.PAUSE

    def _policy(self, trial: Trial, donor: Trial) -> list[Any]:
        """Ray's policy line of an exploit but its last field, the new config: ``[trial's tag, donor's tag,
        trial's training_iteration, donor's training_iteration, donor's config]``."""
        return [
            self._state[trial.trial_id].orig_tag, self._state.get(donor.trial_id, _State()).orig_tag,
            trial.last_result.get("training_iteration", 0), donor.last_result.get("training_iteration", 0),
            copy.deepcopy(donor.config),
        ]

    def _log_policy(self, experiment: Storage, trial: Trial, donor: Trial, new_config: dict[str, Any]) -> None:
        """Ray's policy logs of one exploit, in the experiment's folder (what PBT replays read)."""
        self._write_policy(experiment, trial.trial_id, donor.trial_id, self._policy(trial, donor) + [new_config])

    def _write_policy(self, experiment: Storage, trial_id: str, donor_id: str, policy: list[Any]) -> None:
        line = json.dumps(policy, default=str) + "\n"

        def read(name: str) -> str:
            path = experiment.join(experiment.run_dir, name)
            return experiment.read_bytes(path).decode() if experiment.exists(path) else ""

        experiment.write_text(experiment.join(experiment.run_dir, GLOBAL_LOG), read(GLOBAL_LOG) + line)
        lineage = read(policy_log(donor_id))  # the trial now goes on from the donor: its history too
        experiment.write_text(experiment.join(experiment.run_dir, policy_log(trial_id)), lineage + line)

    def _quantiles(self, controller: Any) -> tuple[list[Trial], list[Trial]]:
        scored = [
            t for t in controller.live_trials()
            if self._state.get(t.trial_id, _State()).last_score is not None
        ]
        if len(scored) < 2:
            return [], []
        scored.sort(key=lambda t: self._state[t.trial_id].last_score or 0.0)  # all scored: never None here
        n = min(max(1, math.ceil(len(scored) * self.quantile_fraction)), len(scored) // 2)
        return scored[:n], scored[-n:]

    def _record(self, trial: Trial, t: float, score: float) -> None:
        """A hook: ``trial`` reached a perturbation point at time ``t`` with (signed) ``score``."""

    def _new_config(self, trial: Trial, donor: Trial) -> dict[str, Any] | PendingConfig:
        """The config ``trial`` restarts with from ``donor``'s checkpoint (PB2 chooses it differently, off
        the controller's thread: it returns a ``PendingConfig``)."""
        return self.explore(donor.config)

    def explore(self, config: dict[str, Any]) -> dict[str, Any]:
        """A mutated copy of ``config``."""
        out = self._mutate(copy.deepcopy(config), self.mutations)
        return self.explore_fn(out) if self.explore_fn else out

    def _mutate(self, config: dict[str, Any], mutations: dict[str, Any]) -> dict[str, Any]:
        for key, spec in mutations.items():
            if isinstance(spec, dict):
                config[key] = self._mutate(dict(config.get(key) or {}), spec)
                continue
            current = config.get(key)
            resample = self.rng.random() < self.resample_probability
            if isinstance(spec, (list, tuple)) or isinstance(spec, Categorical):
                values = list(spec.categories if isinstance(spec, Categorical) else spec)
                if resample or current not in values:
                    config[key] = self.rng.choice(values)
                else:
                    i = values.index(current) + self.rng.choice((-1, 1))
                    config[key] = values[min(max(i, 0), len(values) - 1)]
            elif resample or not isinstance(current, (int, float)):
                config[key] = spec.draw(self.rng, config) if isinstance(spec, Domain) else spec()
            else:
                nudged = current * self.rng.choice(self.factors)
                config[key] = int(nudged) if isinstance(current, int) and not isinstance(current, bool) else nudged
        return config

    def debug_string(self) -> str:
        return f"PopulationBasedTraining: {self.num_perturbations} perturbations"

def _check_mutations(owner: str, mutations: Any, where: tuple[str, ...]) -> None:
    """Each mutation is a non-empty list of values, a search space, a function, or a dict of those
    (as Ray asks), refused now rather than with an AttributeError at the first perturbation."""
    if not isinstance(mutations, dict):
        raise InvalidTypeError(f"{owner}(hyperparam_mutations={mutations!r}): pass a dict such as "
                               "{'lr': tune.loguniform(1e-4, 1e-1), 'batch_size': [32, 64]}.")
    for key, spec in mutations.items():
        path = "".join(f"[{k!r}]" for k in (*where, key))
        if isinstance(spec, dict):
            _check_mutations(owner, spec, (*where, key))
        elif isinstance(spec, (list, tuple)) and not spec:
            raise InvalidArgumentError(f"{owner}: hyperparam_mutations{path} is an empty list; give the values "
                                       "to choose from, e.g. [32, 64, 128].")
        elif not (isinstance(spec, (list, tuple, Domain)) or callable(spec)):
            raise InvalidTypeError(
                f"{owner}: hyperparam_mutations{path}={spec!r}; give a list of values ([0.1, 0.01]), a search "
                "space (tune.uniform(0.001, 0.1)), a function that returns a new value, or a dict of those."
            )

"""Scheduler decisions, fed results directly: the rules as published, signed by mode."""

from __future__ import annotations

import json
import random

import pytest

from muster import tune
from muster.exceptions import InvalidTypeError
from muster.tune.schedulers import (
    ASHAScheduler,
    HyperBandScheduler,
    PB2,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from muster.train.storage import Storage
from muster.tune.schedulers.trial_scheduler import PendingConfig
from muster.tune.trial import Trial


def _trial(i: int, config=None) -> Trial:
    return Trial(f"t{i}", f"trial_{i}", dict(config or {}), f"/tmp/trial_{i}", {"CPU": 1.0})


class _Controller:
    """What schedulers may ask of the Tune controller: its live trials, their checkpoints, the experiment's
    storage (a real folder, given for a scheduler that writes there: PBT's policy logs)."""

    def __init__(self, trials, folder=None):
        self.trials = trials
        self.experiment = Storage(str(folder), "exp") if folder is not None else None

    def live_trials(self):
        return self.trials

    def latest_checkpoint(self, trial):
        return f"ckpt-of-{trial.trial_id}"

    def clone_latest_checkpoint(self, donor, into):
        return f"copy-of-ckpt-of-{donor.trial_id}-for-{into.trial_id}"


def test_asha_stops_the_worse_half_at_each_rung_in_lockstep():
    sched = ASHAScheduler(metric="loss", mode="min", max_t=8, grace_period=1, reduction_factor=2)
    trials = [_trial(i) for i in range(8)]
    ctl = _Controller(trials)
    quality = {t.trial_id: q for t, q in zip(trials, [0.8, 0.1, 0.5, 0.3, 0.9, 0.2, 0.7, 0.4])}
    alive = set(quality)
    stopped_at = {}
    for it in range(1, 9):
        for t in trials:
            if t.trial_id in alive:
                decision = sched.on_trial_result(ctl, t, {"training_iteration": it, "loss": quality[t.trial_id]})
                if decision == TrialScheduler.STOP:
                    alive.discard(t.trial_id)
                    stopped_at[t.trial_id] = it
    # the best trial reaches max_t and is stopped there as finished; bad ones go at the first rung
    assert stopped_at["t1"] == 8
    assert stopped_at["t4"] == 1 and stopped_at["t6"] == 1
    # asynchronous: the first trial at a rung has nobody to be compared with, so it goes on
    assert stopped_at["t0"] > 1
    assert sum(stopped_at.values()) < 0.6 * 8 * 8  # far fewer iterations than running all 8 trials to max_t


def _hyperband(max_t, n_trials, score=lambda i: 1.0):
    """A HyperBandScheduler (eta 3) given ``n_trials`` trials, and ``decide(i, t)``: its answer to trial ``i``
    reporting ``training_iteration`` ``t`` with metric ``score(i)``."""
    hb = HyperBandScheduler(metric="m", mode="max", max_t=max_t, reduction_factor=3)
    trials = [_trial(i) for i in range(n_trials)]
    controller = _Controller(trials)
    for t in trials:
        hb.on_trial_add(controller, t)

    def decide(i, t):
        return hb.on_trial_result(controller, trials[i], {"training_iteration": t, "m": score(i)})

    return hb, controller, trials, decide


def test_hyperband_makes_rays_brackets_in_rays_order():
    # Ray 2.60: s = 0, 1, ..., round(log(max_t)/log(eta)); bracket s holds ceil((s_max+1)/(s+1)*eta**s)
    # trials first judged at int(max_t/eta**s): here (3, 9), (5, 3), (9, 1)
    _, _, _, decide = _hyperband(9, 17)
    assert [decide(i, 3) for i in range(3)] == [TrialScheduler.CONTINUE] * 3  # the first bracket runs to 9
    assert decide(0, 9) == TrialScheduler.STOP
    assert decide(3, 2) == TrialScheduler.CONTINUE and decide(3, 3) == TrialScheduler.PAUSE  # 5 judged at 3
    assert decide(8, 1) == TrialScheduler.PAUSE  # the third bracket's 9 are judged at 1
    # max_t=200: milestones are whole units (66, not 66.7) and s=5 (milestone 0) is skipped, as Ray skips
    # it: after brackets of 6, 9, 18, 41 and 98 trials the next one is s=0 again, run to max_t
    _, _, _, decide = _hyperband(200, 173)
    assert decide(6, 65) == TrialScheduler.CONTINUE and decide(6, 66) == TrialScheduler.PAUSE
    assert decide(172, 199) == TrialScheduler.CONTINUE


def test_hyperband_runs_a_brackets_last_survivors_to_max_t():
    """max_t=20, eta=3: the second bracket (6 trials) is judged at 6, its best 2 went on to 18 (6 * 3) and were
    stopped there, short of max_t (found porting Ray's hyperband_example)."""
    hb, controller, trials, decide = _hyperband(20, 10, score=float)
    assert [decide(i, 6) for i in range(4, 9)] == [TrialScheduler.PAUSE] * 5
    assert decide(9, 6) == TrialScheduler.CONTINUE  # the last to arrive is the best: it goes on, as does 8
    assert hb.choose_trial_to_run(controller, [trials[8]]) is trials[8]
    assert [decide(i, it) for i in (8, 9) for it in (18, 19)] == [TrialScheduler.CONTINUE] * 4
    assert decide(9, 20) == TrialScheduler.STOP and decide(8, 20) == TrialScheduler.STOP


def test_asha_max_mode_and_missing_metric():
    sched = ASHAScheduler(metric="acc", mode="max", max_t=4, grace_period=1, reduction_factor=2)
    a, b = _trial(0), _trial(1)
    ctl = _Controller([a, b])
    assert sched.on_trial_result(ctl, a, {"training_iteration": 1, "acc": 0.9}) == "CONTINUE"
    assert sched.on_trial_result(ctl, b, {"training_iteration": 1, "acc": 0.1}) == "STOP"
    assert sched.on_trial_result(ctl, a, {"training_iteration": 2}) == "CONTINUE"  # no metric: no judgement


def test_median_stopping_rule_stops_a_trial_below_the_median_of_running_means():
    sched = MedianStoppingRule(time_attr="training_iteration", metric="acc", mode="max", grace_period=2,
                               min_samples_required=3)
    trials = [_trial(i) for i in range(4)]
    ctl = _Controller(trials)
    for t, acc in zip(trials[:3], (0.6, 0.7, 0.8)):
        for it in range(1, 5):
            assert sched.on_trial_result(ctl, t, {"training_iteration": it, "acc": acc}) == "CONTINUE"
    late = trials[3]
    assert sched.on_trial_result(ctl, late, {"training_iteration": 1, "acc": 0.1}) == "CONTINUE"  # grace
    assert sched.on_trial_result(ctl, late, {"training_iteration": 2, "acc": 0.2}) == "STOP"


def test_median_stopping_rule_without_hard_stop_pauses_a_trial_once_then_lets_it_run():
    """As Ray's: a paused trial, resumed, runs on. muster paused it at every result after that, so a losing
    trial without checkpoints started again from scratch, over and over, and the experiment never ended."""
    sched = MedianStoppingRule(time_attr="training_iteration", metric="acc", mode="max", grace_period=1,
                               min_samples_required=2, hard_stop=False)
    trials = [_trial(i) for i in range(3)]
    ctl = _Controller(trials)
    for t, acc in zip(trials[:2], (0.7, 0.8)):
        for it in range(1, 4):
            sched.on_trial_result(ctl, t, {"training_iteration": it, "acc": acc})
    late = trials[2]
    assert sched.on_trial_result(ctl, late, {"training_iteration": 1, "acc": 0.1}) == "PAUSE"
    assert [sched.on_trial_result(ctl, late, {"training_iteration": it, "acc": 0.1}) for it in (1, 2, 3)] == \
        ["CONTINUE"] * 3


def _policy_lines(folder, name):
    path = folder / "exp" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else None


def test_pbt_bottom_trial_exploits_a_top_trial_and_explores_its_config(tmp_path):
    sched = PopulationBasedTraining(
        time_attr="training_iteration", metric="score", mode="max", perturbation_interval=2,
        hyperparam_mutations={"lr": [0.001, 0.01, 0.1], "momentum": lambda: random.random()},
        quantile_fraction=0.25, seed=0,
    )
    trials = [_trial(i, {"lr": 0.01, "momentum": 0.5}) for i in range(4)]
    for i, t in enumerate(trials):
        t.experiment_tag = f"{i}_lr=0.0100"
    ctl = _Controller(trials, tmp_path)
    for t, score in zip(trials, (1.0, 2.0, 3.0, 4.0)):
        sched.on_trial_add(ctl, t)
        t.last_result = {"training_iteration": 1, "score": score}  # as the controller sets it
        assert sched.on_trial_result(ctl, t, t.last_result) == "CONTINUE"
    decisions = {}
    for t, s in zip(trials, (1.0, 2.0, 3.0, 4.0)):
        t.last_result = {"training_iteration": 2, "score": s}
        decisions[t.trial_id] = sched.on_trial_result(ctl, t, t.last_result)
    assert decisions["t0"] == "PAUSE" and decisions["t3"] == "CONTINUE"
    new_config, checkpoint, donor = trials[0].restart_plan
    assert donor == "t3" and checkpoint == "copy-of-ckpt-of-t3-for-t0"  # copied when picked
    assert new_config["lr"] in (0.001, 0.01, 0.1)
    assert new_config["momentum"] != 0.5  # nudged by a factor or resampled
    # Ray's tag of an exploited trial: its own, and the new values of the mutated keys
    assert trials[0].experiment_tag == (
        f"0_lr=0.0100@perturbed[lr={new_config['lr']:.4f},momentum={new_config['momentum']:.4f}]"
    )
    assert trials[3].experiment_tag == "3_lr=0.0100"
    # log_config (the default): Ray's policy line, in the experiment's pbt_global.txt and the trial's own log
    # (t0 reports its step 2 first: the donor t3 is still at iteration 1)
    line = ["0_lr=0.0100", "3_lr=0.0100", 2, 1, {"lr": 0.01, "momentum": 0.5}, new_config]
    assert _policy_lines(tmp_path, "pbt_global.txt") == [line]
    assert _policy_lines(tmp_path, "pbt_policy_t0.txt") == [line]
    assert _policy_lines(tmp_path, "pbt_policy_t3.txt") is None  # the donor was not exploited
    # a trial that exploits t0 inherits t0's lineage (Ray copies the donor's log, then appends)
    trials[1].last_result = {"training_iteration": 4}
    sched._log_policy(ctl.experiment, trials[1], trials[0], {"lr": 0.1, "momentum": 0.3})
    later = ["1_lr=0.0100", "0_lr=0.0100", 4, 2, trials[0].config, {"lr": 0.1, "momentum": 0.3}]
    assert _policy_lines(tmp_path, "pbt_policy_t1.txt") == [line, later]
    assert _policy_lines(tmp_path, "pbt_global.txt") == [line, later]


class _NoCheckpoints(_Controller):
    def __init__(self, trials, saved=()):
        super().__init__(trials)
        self.saved = set(saved)

    def latest_checkpoint(self, trial):
        return f"ckpt-of-{trial.trial_id}" if trial.trial_id in self.saved else None


def test_pbt_warns_of_missing_checkpoints_only_once_none_can_be_on_their_way(recwarn):
    def perturb_at(sched, ctl, trials, t):
        for trial, score in zip(trials, (1.0, 2.0, 3.0, 4.0)):
            sched.on_trial_result(ctl, trial, {"training_iteration": t, "score": score})

    def scheduler():
        return PopulationBasedTraining(time_attr="training_iteration", metric="score", mode="max",
                                       perturbation_interval=2, hyperparam_mutations={"lr": [0.1, 0.2]},
                                       quantile_fraction=0.25, seed=0)

    trials = [_trial(i, {"lr": 0.1}) for i in range(4)]
    saving = scheduler()
    perturb_at(saving, _NoCheckpoints(trials, saved={"t1"}), trials, 2)  # the top trial's is not in yet
    perturb_at(saving, _NoCheckpoints(trials, saved={"t1"}), trials, 4)
    none = scheduler()
    perturb_at(none, _NoCheckpoints(trials), trials, 2)
    assert not [w for w in recwarn if "checkpoint to clone" in str(w.message)]  # the first perturbation: quiet
    perturb_at(none, _NoCheckpoints(trials), trials, 4)
    (warned,) = [w for w in recwarn if "checkpoint to clone" in str(w.message)]
    assert "PopulationBasedTraining: no trial has a checkpoint to clone at training_iteration=4" in str(warned.message)


def test_pb2_bottom_trial_clones_a_top_trial_and_takes_a_bandit_config_in_bounds(tmp_path):
    sched = PB2(time_attr="training_iteration", metric="loss", mode="min", perturbation_interval=1,
                hyperparam_bounds={"lr": [0.0, 1.0], "opt": {"beta": [1, 9]}}, quantile_fraction=0.25, seed=0)
    lrs = (0.1, 0.3, 0.5, 0.8)
    trials = [_trial(i, {"lr": lr, "opt": {"beta": 3}}) for i, lr in enumerate(lrs)]
    filled = _trial(9)
    ctl = _Controller(trials, tmp_path)
    for t in trials + [filled]:
        sched.on_trial_add(ctl, t)
    assert 0 <= filled.config["lr"] <= 1 and 1 <= filled.config["opt"]["beta"] <= 9  # drawn within bounds
    loss = {t.trial_id: 10.0 for t in trials}
    decisions = {}
    # loss falls fastest for lr near 0.8; t0 (the worst) reports first at step 1 (nobody to compare with yet),
    # last at step 2, when every trial has one observation (its change in score from step 1)
    for step, order in ((1, trials), (2, trials[::-1])):
        for t in order:
            loss[t.trial_id] -= 1 - (t.config["lr"] - 0.8) ** 2 * 4
            result = {"training_iteration": step, "loss": loss[t.trial_id]}
            decisions[t.trial_id, step] = sched.on_trial_result(ctl, t, result)
    assert [d for d in decisions.values() if d != "CONTINUE"] == ["PAUSE"]
    assert decisions["t0", 2] == "PAUSE" and sched.num_perturbations == 1
    pending, checkpoint, donor = trials[0].restart_plan
    assert isinstance(pending, PendingConfig)  # the GP is fitted off the controller's thread
    new_config = pending.result()  # what the controller does once it is done
    assert donor == "t3" and checkpoint == "copy-of-ckpt-of-t3-for-t0"
    assert 0.0 <= new_config["lr"] <= 1.0 and new_config["lr"] not in lrs  # chosen by the bandit
    assert isinstance(new_config["opt"]["beta"], int) and 1 <= new_config["opt"]["beta"] <= 9  # keeps int
    assert trials[0].experiment_tag.startswith("@perturbed[lr=")
    # the exploited trial's next observation starts from the donor's time and score, with the new config
    assert sched.data[-1][0] == "t0" and sched.data[-1][3] == -loss["t3"]
    # PB2 logs its exploits as PBT does (log_config=True, the default); log_config=False writes nothing
    assert [line[5] for line in _policy_lines(tmp_path, "pbt_global.txt")] == [new_config]
    assert _policy_lines(tmp_path, "pbt_policy_t0.txt")[0][4] == {"lr": 0.8, "opt": {"beta": 3}}
    quiet = PB2(time_attr="training_iteration", metric="loss", mode="min", perturbation_interval=1,
                hyperparam_bounds={"lr": [0.0, 1.0]}, quantile_fraction=0.5, log_config=False, seed=0)
    pair = [_trial(i, {"lr": lr}) for i, lr in enumerate((0.1, 0.9))]
    ctl = _Controller(pair, tmp_path / "quiet")
    for t in pair:
        quiet.on_trial_add(ctl, t)
    for step in (1, 2):
        for t in pair:
            quiet.on_trial_result(ctl, t, {"training_iteration": step, "loss": 1 - step * t.config["lr"]})
    assert quiet.num_perturbations >= 1 and not (tmp_path / "quiet").exists()


def test_pb2_fits_its_gp_off_the_controllers_thread_and_its_decision_does_not_wait_for_the_fit(tmp_path,
                                                                                             monkeypatch):
    """The GP fit takes seconds at many observations: the controller's thread must not wait for it."""
    import threading

    from muster.tune.schedulers import pb2 as pb2_module

    controller_thread, fitted_on, release = threading.current_thread(), [], threading.Event()
    real_select = pb2_module.select_config

    def held_select(*args, **kwargs):  # the real fit, held until the test lets it go
        fitted_on.append(threading.current_thread())
        if threading.current_thread() is controller_thread:
            raise AssertionError("PB2 fitted its GP on the controller's thread")
        release.wait()
        return real_select(*args, **kwargs)

    monkeypatch.setattr(pb2_module, "select_config", held_select)
    sched = PB2(time_attr="training_iteration", metric="loss", mode="min", perturbation_interval=1,
                hyperparam_bounds={"lr": [0.0, 1.0]}, quantile_fraction=0.5, seed=0)
    weak, strong = pair = [_trial(i, {"lr": lr}) for i, lr in enumerate((0.1, 0.9))]
    ctl = _Controller(pair, tmp_path)
    for t in pair:
        sched.on_trial_add(ctl, t)
    for step, order in ((1, pair), (2, pair[::-1])):  # the weak trial reports last: the strong one has an observation
        decisions = [sched.on_trial_result(ctl, t, {"training_iteration": step, "loss": 1 - step * t.config["lr"]})
                     for t in order]
    assert decisions == ["CONTINUE", "PAUSE"]
    pending = weak.restart_plan[0]
    assert isinstance(pending, PendingConfig) and not pending.done()  # decided while the fit is still held
    assert sched.on_trial_result(ctl, strong, {"training_iteration": 3, "loss": -2.0}) == "CONTINUE"  # goes on
    release.set()
    config = pending.result()
    assert fitted_on and fitted_on[0] is not controller_thread
    assert 0.0 <= config["lr"] <= 1.0 and weak.experiment_tag.startswith("@perturbed[lr=")
    assert sched.data[-1][0] == weak.trial_id  # its next observation starts from the donor's point
    assert _policy_lines(tmp_path, "pbt_global.txt")[0][5] == config  # logged once settled


def test_pb2_fits_at_most_the_1000_most_recent_observations_as_ray():
    sched = PB2(metric="loss", mode="min", hyperparam_bounds={"lr": [0.0, 1.0]})
    pair = [_trial(i, {"lr": lr}) for i, lr in enumerate((0.1, 0.9))]
    for t in pair:
        sched.on_trial_add(_Controller(pair), t)
    for step in range(1, 602):  # 600 observations per trial: each consecutive pair of its points
        for t in pair:
            sched._record(t, float(step), -float(step))
    x, y, owners = sched._observations()
    assert x.shape == (1000, 3) and len(y) == len(owners) == 1000
    assert x[:, 0].min() == 102.0 and x[:, 0].max() == 601.0  # the latest: 1200 - 1000 = 200 oldest left out


def test_pb2_refuses_a_bounded_key_whose_value_is_no_number():
    sched = PB2(metric="loss", mode="min", hyperparam_bounds={"opt": {"lr": [0.0, 1.0]}})
    with pytest.raises(InvalidTypeError, match=r"t1's config has opt/lr='fast'.*hyperparam_bounds \[0.0, 1.0\]"):
        sched.on_trial_add(_Controller([]), _trial(1, {"opt": {"lr": "fast"}}))


def test_create_scheduler_and_searcher_by_rays_names():
    from muster.tune.search import BasicVariantGenerator

    asha = tune.create_scheduler("async_hyperband", metric="loss", mode="min", max_t=8)
    pbt = tune.create_scheduler("pbt", hyperparam_mutations={"lr": [1, 2]})
    assert isinstance(asha, ASHAScheduler) and isinstance(pbt, PopulationBasedTraining)
    assert isinstance(tune.create_searcher("random", max_concurrent=2), BasicVariantGenerator)
    with pytest.raises(ValueError, match="create_scheduler\\('hb_bohb'\\): muster's schedulers are"):
        tune.create_scheduler("hb_bohb")
    with pytest.raises(ValueError, match="'hyperopt'.*not ported"):
        tune.create_searcher("hyperopt")

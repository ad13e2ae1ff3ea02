"""Ray Tune APIs: class Trainable (with PBT), HyperBandScheduler, LoggerCallback, boolean/callable stop criteria."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import time

import _pbt_pair
import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train import Checkpoint
from muster.tune.logger import LoggerCallback
from muster.tune.schedulers import HyperBandScheduler, PopulationBasedTraining
from muster.tune.schedulers.trial_scheduler import TrialScheduler


class Counter(tune.Trainable):
    def setup(self, config):
        self.value = 0.0
        self.lr = config["lr"]
        self.restored = 0

    def step(self):
        # both trials are running when PBT ranks them, however far apart their workers start (step N+1 runs once
        # the controller acted on result N, so iteration N's result is handled here)
        if self.iteration == 0 or self.restored:
            _pbt_pair.at_start(self.config.get("marks"), restored=self.restored > 0, weak=self.lr == 0.1)
        if self.iteration:
            _pbt_pair.after_result(self.config.get("marks"), self.iteration, strong=self.lr == 10.0)
        time.sleep(0.3)
        self.value += self.lr
        return {"score": self.value, "restored": self.restored, "done": self.iteration + 1 >= 6}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]
        self.restored += 1


def test_trainable_class_runs_until_done_and_pbt_exploits_its_checkpoints(storage, tmp_path):
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": [0.1, 1.0, 10.0]}, quantile_fraction=0.5, seed=0)
    grid = tune.Tuner(
        Counter,
        param_space={"lr": tune.grid_search([0.1, 10.0]), "marks": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    assert all(r.metrics["done"] is True for r in grid), [r.metrics for r in grid]  # ran until step() said done
    assert pbt.num_perturbations >= 1
    assert max(r.metrics["restored"] for r in grid) >= 1  # load_checkpoint got the donor's dict


class Seven(tune.Trainable):
    def setup(self, config):
        self.value = 0

    def step(self):
        self.value += 1
        return {"value": self.value, "done": self.iteration + 1 >= 7}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}


def _saved_iterations(storage, name, **checkpointing):
    grid = tune.Tuner(
        Seven,
        run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(**checkpointing)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    return sorted(m["training_iteration"] for _, m in grid[0].best_checkpoints)


def test_class_trainable_checkpoint_frequency_and_at_end(storage):
    assert _saved_iterations(storage, "k3", checkpoint_frequency=3, checkpoint_at_end=True) == [3, 6, 7]
    assert _saved_iterations(storage, "k3_no_end", checkpoint_frequency=3, checkpoint_at_end=False) == [3, 6]
    assert _saved_iterations(storage, "end_only", checkpoint_frequency=0) == [7]  # at_end defaults to True
    assert _saved_iterations(storage, "default") == [1, 2, 3, 4, 5, 6, 7]


def test_air_checkpoint_config_is_tunes_and_tune_uses_it(storage):
    import muster.air
    from muster.train import RunConfig

    # Ray's ray.air.CheckpointConfig is the Tune/AIR class: it takes the class-trainable settings.
    config = muster.air.CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=False)
    assert muster.air.CheckpointConfig is tune.CheckpointConfig
    grid = tune.Tuner(Seven, run_config=RunConfig(storage_path=storage, name="air", verbose=0,
                                                  checkpoint_config=config)).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted(m["training_iteration"] for _, m in grid[0].best_checkpoints) == [2, 4, 6]


def _one_report(config):
    tune.report({"ok": 1})


@pytest.mark.parametrize(
    "checkpointing, fix",
    [({"checkpoint_frequency": 2}, "every 2 iterations"), ({"checkpoint_at_end": True}, "its last tune.report")],
)
def test_function_trainables_refuse_class_checkpoint_settings(storage, checkpointing, fix):
    tuner = tune.Tuner(_one_report, run_config=tune.RunConfig(
        storage_path=storage, verbose=0, checkpoint_config=tune.CheckpointConfig(**checkpointing)))
    with pytest.raises(InvalidArgumentError, match=f"class trainables .*{fix}"):
        tuner.fit()
    # As in Ray, the settings that ask for nothing are fine for a function.
    grid = tune.Tuner(_one_report, run_config=tune.RunConfig(
        storage_path=storage, verbose=0,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0, checkpoint_at_end=False))).fit()
    assert grid.num_errors == 0 and grid[0].metrics["ok"] == 1


def test_a_trainer_refuses_class_checkpoint_settings(storage):
    from muster.train import ScalingConfig
    from muster.train.torch import TorchTrainer

    trainer = TorchTrainer(_one_report, scaling_config=ScalingConfig(num_workers=1))
    tuner = tune.Tuner(trainer, run_config=tune.RunConfig(
        storage_path=storage, verbose=0, checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False)))
    with pytest.raises(InvalidArgumentError, match=r"does not apply to a TorchTrainer.*train.report"):
        tuner.fit()


def _stepper(config):
    for i in range(20):
        tune.report({"i": i, "done": i == config["stop_at"], "loss": 1.0 / (i + 1)})


def test_boolean_and_callable_stop_criteria(storage):
    grid = tune.Tuner(
        _stepper,
        param_space={"stop_at": 3},
        run_config=tune.RunConfig(storage_path=storage, name="b", verbose=0, stop={"done": True}),
    ).fit()
    assert grid[0].metrics["i"] == 3
    grid = tune.Tuner(
        _stepper,
        param_space={"stop_at": 99},
        run_config=tune.RunConfig(storage_path=storage, name="c", verbose=0, stop={"loss": lambda v: v < 0.2}),
    ).fit()
    # The trial's metrics are the result the stop acted on: the first with loss 1/(i+1) < 0.2; as in Ray,
    # its function went no further (tune.report waits for the decision), so nothing follows it.
    assert grid[0].metrics["i"] == 5
    assert list(grid[0].metrics_dataframe["i"]) == [0, 1, 2, 3, 4, 5]


def _falls_or_flat(config):
    for i in range(20):
        tune.report({"i": i, "loss": 1.0 / (i + 1) if config["shape"] == "falls" else 0.15})


def _late_stop(loss):
    """Stop below 0.2, deciding slowly: a trial that ran ahead of the controller would report on meanwhile."""
    return loss < 0.2 and not time.sleep(0.5)


def test_the_best_result_is_ranked_on_the_results_the_experiment_acted_on(storage):
    grid = tune.Tuner(
        _falls_or_flat,
        param_space={"shape": tune.grid_search(["falls", "flat"])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop={"loss": _late_stop}),
    ).fit()
    falls, flat = sorted(grid, key=lambda r: r.config["shape"])
    # Acted on: "falls" at i=5 (loss 1/6), "flat" at i=0 (0.15); as in Ray, "falls" reported no lower
    # loss after its stop, however slowly it was decided, and "flat" is the best.
    assert (falls.metrics["i"], flat.metrics["i"]) == (5, 0)
    assert list(falls.metrics_dataframe["i"]) == [0, 1, 2, 3, 4, 5]
    for scope in ("last", "all", "avg"):
        assert grid.get_best_result(scope=scope).config["shape"] == "flat", scope


def _climber(config):
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read()) + 1
    for step in range(start, 30):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            tune.report({"loss": config["x"], "step": step}, checkpoint=Checkpoint.from_directory(d))


class _Log(LoggerCallback):
    def __init__(self):
        self.events = []

    def log_trial_start(self, trial):
        self.events.append(("start", trial.trial_id))

    def log_trial_result(self, iteration, trial, result):
        self.events.append(("result", trial.trial_id))

    def log_trial_end(self, trial, failed=False):
        self.events.append(("end", trial.trial_id, failed, trial.status))


def test_hyperband_promotes_the_best_and_logger_callback_sees_every_trial(storage):
    hb = HyperBandScheduler(max_t=9, reduction_factor=3)
    log = _Log()
    grid = tune.Tuner(
        _climber,
        param_space={"x": tune.grid_search([0.5, 0.1, 0.9, 0.3, 0.7, 0.6])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=hb, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[log]),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    iters = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    # Each trial's metrics are the result the scheduler acted on, whatever it reported before the
    # stop reached it. Ray's bracket order (s = 0, 1, 2): the first bracket (3 trials) runs to max_t;
    # the second (up to 5, first judged at 3) keeps ceil(5/3) = 2 of its 3, stopping the worst.
    assert iters == {0.5: 9, 0.1: 9, 0.9: 9, 0.3: 9, 0.7: 3, 0.6: 9}, iters
    assert hb.num_stopped == 1
    ids = {r.metrics["trial_id"] for r in grid}
    assert {e[1] for e in log.events if e[0] == "start"} == ids
    assert {e[1] for e in log.events if e[0] == "end"} == ids and not any(e[2] for e in log.events if e[0] == "end")
    # the logger saw every result, those reported while a stop was on its way included
    assert sum(e[0] == "result" for e in log.events) == sum(len(r.metrics_dataframe) for r in grid)
    # a trial HyperBand stops is PAUSED to on_trial_complete where it waited paused at its milestone (as Ray's
    # stop_trial shows it, TERMINATED only after), RUNNING where its own result decided; the others end RUNNING
    stopped = next(r.metrics["trial_id"] for r in grid if r.config["x"] == 0.7)
    ends = {e[1]: e[3] for e in log.events if e[0] == "end"}
    assert ends[stopped] in ("PAUSED", "RUNNING"), ends
    assert all(status == "RUNNING" for i, status in ends.items() if i != stopped), ends


class _Steps(tune.Trainable):
    def setup(self, config):
        self.it = 0

    def step(self):
        self.it += 1
        return {"score": self.config["x"] * self.it}

    def save_checkpoint(self, checkpoint_dir):
        return {"it": self.it}

    def load_checkpoint(self, checkpoint):
        self.it = checkpoint["it"]


def test_hyperband_resumes_every_promoted_trial_even_when_they_wait_for_room(storage):
    # two trials at a time (2 of the session's 4 CPUs each): at a milestone the promoted trials cannot
    # all restart at once, and the one left waiting used to lose its promotion, so the bracket
    # stalled and ended early
    grid = tune.Tuner(
        tune.with_resources(_Steps, {"cpu": 2}), param_space={"x": tune.grid_search(list(range(1, 18)))},
        tune_config=tune.TuneConfig(metric="score", mode="max",
                                    scheduler=HyperBandScheduler(max_t=9, reduction_factor=3)),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    iters = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    # Ray 2.60's outcome: brackets s = 0 (3 trials, to max_t), s = 1 (5 trials, 5 -> 2 at 3),
    # s = 2 (9 trials: 9 -> 3 at 1 -> 1 at 3)
    assert iters == {**dict.fromkeys([1, 2, 3, 7, 8, 17], 9), **dict.fromkeys([4, 5, 6, 15, 16], 3),
                     **dict.fromkeys(range(9, 15), 1)}, iters


def _keeps_one_checkpoint(config):
    step, restored = 0, 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            step, restored = int(open(os.path.join(folder, "step")).read()), 1
    while step < 12:
        step += 1
        time.sleep(0.05)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step"), "w") as f:
                f.write(str(step))
            tune.report({"score": config["lr"] * step, "restored": restored},
                        checkpoint=Checkpoint.from_directory(folder))


def test_pbt_exploits_a_donor_checkpoint_even_after_the_donors_run_deleted_it(storage):
    # num_to_keep=1: each new checkpoint deletes the one before, so the donor's checkpoint PBT picked
    # was gone by the time the exploiting trial restarted (FileNotFoundError); it is copied at once now
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=3,
                                  hyperparam_mutations={"lr": [0.1, 1.0, 10.0]}, quantile_fraction=0.5, seed=0)
    grid = tune.Tuner(
        _keeps_one_checkpoint, param_space={"lr": tune.grid_search([0.1, 0.1, 10.0, 10.0])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    assert pbt.num_perturbations > 0 and any(r.metrics["restored"] for r in grid)


class _AsksForCheckpoints(tune.Trainable):
    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"n": self.n, "should_checkpoint": self.n % 2 == 0, "done": self.n == 5}

    def save_checkpoint(self, checkpoint_dir):
        return {"n": self.n}

    def load_checkpoint(self, checkpoint):
        self.n = checkpoint["n"]


def test_a_step_result_with_should_checkpoint_is_saved_whatever_the_frequency(storage):
    grid = tune.Tuner(_AsksForCheckpoints, run_config=tune.RunConfig(
        storage_path=storage, verbose=0,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0, checkpoint_at_end=False))).fit()
    saved = sorted(metrics["n"] for _, metrics in grid[0].best_checkpoints)
    assert saved == [2, 4], saved  # the steps that asked (Ray's manual checkpointing), and no others


class _PauseForever(TrialScheduler):
    """Pauses every trial at its second result and never resumes one (a scheduler bug)."""

    def on_trial_result(self, controller, trial, result):
        return self.PAUSE if result["training_iteration"] >= 2 else self.CONTINUE

    def choose_trial_to_run(self, controller, candidates):
        return next((t for t in candidates if t.status == "PENDING"), None)


def test_paused_trials_no_scheduler_resumes_end_instead_of_hanging(storage):
    grid = tune.Tuner(
        _climber,
        param_space={"x": tune.grid_search([0.1, 0.2])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=_PauseForever()),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0
    assert all(2 <= r.metrics["training_iteration"] < 30 for r in grid)  # paused early, then ended


def _three(config):
    for i in range(3):
        tune.report({"v": i})


def test_results_carry_rays_automatic_fields(storage):
    grid = tune.Tuner(_three, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    df = grid[0].metrics_dataframe
    assert list(df["iterations_since_restore"]) == [1, 2, 3] and list(df["training_iteration"]) == [1, 2, 3]
    assert (df["time_since_restore"].diff().dropna() >= 0).all()
    for field in ("hostname", "node_ip", "date", "time_total_s", "time_this_iter_s", "trial_id"):
        assert field in grid.get_dataframe().columns, field
    row = grid.get_dataframe().iloc[0]  # Ray's ExperimentAnalysis.dataframe row: `logdir` is the trial folder
    # Ray's rows are its logged results: a trial that ran to its end has done False in each (only the
    # result a stopper or scheduler stopped it on says True), its last result done True
    assert row["logdir"] == grid[0].path and bool(row["done"]) is False
    assert bool(grid.get_dataframe(filter_metric="v", filter_mode="min").iloc[0]["done"]) is False
    assert grid[0].metrics["done"] is True and grid[0].metrics["config"] == grid[0].config  # Ray's last result


def test_trial_folders_hold_rays_params_files(storage):
    # Ray's tune-output guide: each trial folder has params.json and params.pkl (its config)
    grid = tune.Tuner(_three, param_space={"lr": tune.grid_search([0.1]), "net": {"layers": 2}, "tags": {"a"}},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    with open(os.path.join(grid[0].path, "params.json")) as f:
        assert json.load(f) == {"lr": 0.1, "net": {"layers": 2}, "tags": ["a"]}  # a set as a list
    with open(os.path.join(grid[0].path, "params.pkl"), "rb") as f:
        assert pickle.load(f) == grid[0].config


class SavesIntoItsFolder(tune.Trainable):
    """Ray's "How to Save and Load Trial Checkpoints" sample: save_checkpoint returns its folder."""

    def setup(self, config):
        self.value = 0

    def step(self):
        self.value += 1
        return {"value": self.value, "done": self.iteration + 1 >= 2}

    def save_checkpoint(self, tmp_checkpoint_dir):
        with open(os.path.join(tmp_checkpoint_dir, "value.txt"), "w") as f:
            f.write(str(self.value))
        return tmp_checkpoint_dir

    def load_checkpoint(self, tmp_checkpoint_dir):
        with open(os.path.join(tmp_checkpoint_dir, "value.txt")) as f:
            self.value = int(f.read())


def test_save_checkpoint_may_return_the_folder_it_was_given(storage, tmp_path):
    grid = tune.Tuner(SavesIntoItsFolder, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    with grid[0].checkpoint.as_directory() as d:
        assert open(os.path.join(d, "value.txt")).read() == "2"

    class Elsewhere(SavesIntoItsFolder):
        def save_checkpoint(self, tmp_checkpoint_dir):
            return str(tmp_path)

    with pytest.raises(InvalidTypeError, match=rf"returned '{tmp_path}'.*return None or the checkpoint_dir"):
        Elsewhere({}).save(str(tmp_path / "given"))


class _StopAtFour(tune.Stopper):
    def __call__(self, trial_id, result):
        return result["training_iteration"] >= 4


@pytest.mark.parametrize(
    "stop, checkpointing, saved",
    [
        ({"training_iteration": 2}, {"checkpoint_frequency": 0}, [2]),
        (_StopAtFour(), {"checkpoint_frequency": 3}, [3, 4]),
        # Ray's trial_checkpoint doc_code: the stop falls on a periodic save (it ran a third step, saved again)
        ({"training_iteration": 2}, {"checkpoint_frequency": 2}, [2]),
        ({"training_iteration": 2}, {}, [1, 2]),  # muster's default: every step saved
    ],
)
def test_checkpoint_at_end_saves_a_class_trial_a_stop_condition_ends(storage, stop, checkpointing, saved):
    grid = tune.Tuner(
        Seven,
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=stop,
                                  checkpoint_config=tune.CheckpointConfig(**checkpointing)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted(m["training_iteration"] for _, m in grid[0].best_checkpoints) == saved
    # the trial ran no further than the stop, and its saved result was reported once
    df = grid[0].metrics_dataframe
    assert list(df["training_iteration"]) == list(range(1, saved[-1] + 1))
    assert list(df["iterations_since_restore"]) == list(df["training_iteration"])
    assert grid[0].metrics["training_iteration"] == saved[-1] == df["value"].iloc[-1]
    assert grid[0].best_checkpoints[0][1]["trial_id"] == grid[0].metrics["trial_id"]
    folders = sorted(f for f in os.listdir(grid[0].path) if f.startswith("checkpoint_"))
    assert folders == [f"checkpoint_{i:06d}" for i in saved], folders  # no step past the stop saved either
    with open(os.path.join(grid[0].path, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == list(range(1, saved[-1] + 1))


class _RaysCustomLogger(LoggerCallback):
    """Ray's Tune "Loggers" guide sample: one file per trial, in the trial's folder, keyed by trial."""

    def __init__(self, filename="out.log"):
        self._trial_files = {}
        self._filename = filename
        self.steps = []

    def log_trial_start(self, trial):
        self._trial_files[trial] = open(os.path.join(trial.local_path, self._filename), "at")

    def log_trial_result(self, iteration, trial, result):
        if trial in self._trial_files:
            self._trial_files[trial].write(f"{result['training_iteration']} {result['v']}\n")

    def on_trial_complete(self, iteration, trials, trial, **info):
        if trial in self._trial_files:
            self._trial_files[trial].close()
            del self._trial_files[trial]

    def on_step_begin(self, iteration, trials, **info):
        self.steps.append(("begin", iteration))

    def on_step_end(self, iteration, trials, **info):
        self.steps.append(("end", iteration))


def test_rays_logger_callback_sample_writes_into_each_trials_local_path(storage):
    log = _RaysCustomLogger()
    grid = tune.Tuner(_three, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[log])).fit()
    assert grid.num_errors == 0 and log._trial_files == {}
    for r in grid:
        assert open(os.path.join(r.path, "out.log")).read() == "1 0\n2 1\n3 2\n"
    # Ray calls on_step_begin/on_step_end once per step of its loop, counting the steps
    begins = [i for kind, i in log.steps if kind == "begin"]
    ends = [i for kind, i in log.steps if kind == "end"]
    assert begins and begins == list(range(len(begins))) and ends == list(range(1, len(ends) + 1))


@pytest.mark.filterwarnings("ignore:tune.get_context")
def test_get_context_outside_a_trial_gives_none_as_rays_does():
    ctx = tune.get_context()  # Ray's guides call a trainable's function directly to try it out
    assert ctx.get_trial_id() is None
    assert ctx.get_trial_name() is None and ctx.get_trial_dir() is None and ctx.get_experiment_name() is None
    assert ctx.get_trial_resources() is None
    assert (ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank()) == (0, 1, 0)


def test_get_context_names_what_to_use_for_rays_get_storage_and_get_metadata():
    """Ray 2.60's TuneContext has get_storage (and get_metadata, deprecated); muster's raised a bare
    AttributeError that named nothing."""
    from muster.exceptions import UnsupportedRayAPIError

    ctx = tune.get_context()
    with pytest.raises(UnsupportedRayAPIError, match=r"TuneContext\.get_storage .*get_trial_dir\(\)"):
        ctx.get_storage()
    with pytest.raises(UnsupportedRayAPIError, match=r"TuneContext\.get_metadata .*config"):
        ctx.get_metadata()
    with pytest.raises(AttributeError, match="no attribute 'no_such_getter'"):
        ctx.no_such_getter
    assert not hasattr(ctx, "get_storage") and pickle.loads(pickle.dumps(ctx)) == ctx


def _tried_out(config):
    """A trainable as Ray's guides write it, which a script may call directly to try it out."""
    start = tune.get_checkpoint()
    for step in range(2):
        tune.report({"loss": config["lr"] * step})
    return start


def test_a_trainable_called_outside_a_trial_reports_nothing_and_warns_as_rays(recwarn):
    """Ray 2.60's tune.report and tune.get_checkpoint outside a Tuner's trial warn once each and return
    None; muster's raised a RuntimeError, so the trainable could not be called directly."""
    from muster.tune import session

    session._warned.difference_update({"report", "get_checkpoint"})
    assert _tried_out({"lr": 0.1}) is None
    assert _tried_out({"lr": 0.2}) is None
    messages = [str(w.message) for w in recwarn.list]
    assert sum("tune.report() was called outside a trial" in m for m in messages) == 1
    assert sum("tune.get_checkpoint() was called outside a trial" in m for m in messages) == 1
    assert all("returns None, as Ray's does" in m for m in messages if "outside a trial" in m)


class _Hooks(tune.Callback):
    """Records the trial hooks Ray's callbacks get, in order, with the checkpoints handed over."""

    def __init__(self):
        self.calls, self.checkpoints = [], []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append("start")

    def on_trial_save(self, iteration, trials, trial, **info):
        self.calls.append("save")

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.calls.append("checkpoint")
        with checkpoint.as_directory() as folder:
            self.checkpoints.append(open(os.path.join(folder, "step.txt")).read())

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.calls.append("recover")

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.calls.append("restore")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.calls.append("complete")


def _saves_then_fails_once(config):
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            start = int(open(os.path.join(folder, "step.txt")).read())
    for step in range(start + 1, 4):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step.txt"), "w") as f:
                f.write(str(step))
            tune.report({"step": step}, checkpoint=Checkpoint.from_directory(folder))
        if step == 2 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("planned failure after the second checkpoint")


class _SaveLog(LoggerCallback):
    def __init__(self):
        self.saved = self.restored = 0

    def log_trial_save(self, trial):
        self.saved += 1

    def log_trial_restore(self, trial):
        self.restored += 1


def test_callbacks_hear_of_each_checkpoint_a_recovery_and_the_restore(storage, tmp_path):
    hooks, log = _Hooks(), _SaveLog()
    grid = tune.Tuner(
        _saves_then_fails_once, param_space={"marker": str(tmp_path / "failed-once")},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[hooks, log],
                                  failure_config=tune.FailureConfig(max_failures=1)),
    ).fit()
    assert grid.num_errors == 0 and grid[0].metrics["step"] == 3
    # Ray's order: each commit is on_checkpoint with it and then a save; the failure is a recovery and a
    # start again; the restart from the second checkpoint a restore (muster's: Ray 2.60 has no caller of it)
    assert hooks.calls == ["start", "checkpoint", "save", "checkpoint", "save", "recover", "start", "restore",
                           "checkpoint", "save", "complete"], hooks.calls
    assert hooks.checkpoints == ["1", "2", "3"]
    assert (log.saved, log.restored) == (3, 1)  # a LoggerCallback hears of them as log_trial_save/restore


def _uses_mutated_keys(config):
    for step in range(3):
        tune.report({"score": config["factor"] + config["nested"]["k"] + config["pick"] + step})


def test_pbt_draws_the_keys_of_its_mutations_that_the_config_lacks(storage):
    # Ray's PBT example has no param_space: every key comes from hyperparam_mutations (each trial failed
    # with KeyError before)
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, seed=1,
                                  hyperparam_mutations={"factor": lambda: 5.0, "pick": [1, 2],
                                                        "nested": {"k": tune.uniform(0, 1)}})
    grid = tune.Tuner(_uses_mutated_keys, tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt,
                                                                      num_samples=2),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    for r in grid:
        assert r.config["factor"] == 5.0 and r.config["pick"] in (1, 2) and 0 <= r.config["nested"]["k"] <= 1


def _returns_a_number(config):
    return config["a"] + config["b"]


def _yields(config):
    for i in range(3):
        yield {"i": i, "score": config["a"] * i}


def test_a_trainable_may_return_a_number_or_yield_results_as_in_ray(storage):
    grid = tune.Tuner(_returns_a_number, param_space={"a": tune.grid_search([1, 2]), "b": 10},
                      tune_config=tune.TuneConfig(metric="_metric", mode="max"),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0 and sorted(r.metrics["_metric"] for r in grid) == [11, 12]
    assert grid.get_best_result().config["a"] == 2
    (r,) = tune.Tuner(_yields, param_space={"a": 3},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert [row["i"] for row in r.metrics_dataframe.to_dict("records")] == [0, 1, 2]
    assert r.metrics["score"] == 6 and r.metrics["training_iteration"] == 3


class _RaysExampleSearcher(tune.search.Searcher):
    """Ray's Searcher docstring example: its hooks take keywords (result=, error=) in **kwargs."""

    def __init__(self, metric="score", mode="max", **kwargs):
        super().__init__(metric=metric, mode=mode, **kwargs)
        self.configurations, self.completed = {}, []

    def suggest(self, trial_id):
        if len(self.configurations) >= 3:
            return tune.search.Searcher.FINISHED
        self.configurations[trial_id] = {"a": len(self.configurations)}
        return self.configurations[trial_id]

    def on_trial_complete(self, trial_id, result, **kwargs):
        self.completed.append((trial_id, result["score"], kwargs.get("error", False)))


def _score_is_a(config):
    tune.report({"score": config["a"]})


class _SetupSees(tune.Callback):
    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.seen = (stop, num_samples, total_num_samples, info.get("time_budget_s"))


def test_a_searcher_with_rays_hook_signatures_and_what_callback_setup_is_told(storage):
    from muster.tune.experiment import Trial
    from muster.tune.experiment.trial import Trial as SameTrial

    assert Trial is SameTrial  # Ray's callback examples import it from there
    searcher, seen = _RaysExampleSearcher(), _SetupSees()
    grid = tune.Tuner(_score_is_a, tune_config=tune.TuneConfig(search_alg=searcher, num_samples=5),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[seen])).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted(s for _, s, _ in searcher.completed) == [0, 1, 2] and not any(e for _, _, e in searcher.completed)
    grid = tune.Tuner(_one_report, param_space={"a": tune.grid_search([1, 2, 3])},
                      tune_config=tune.TuneConfig(num_samples=2, time_budget_s=60),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[seen],
                                                stop={"training_iteration": 5})).fit()
    assert seen.seen == ({"training_iteration": 5}, 2, 6, 60)


def test_a_trainable_used_on_its_own_as_rays_docstrings_do(tmp_path, monkeypatch):
    """Outside a Tuner: trial names are "default", train() carries Tune's fields, save() makes its own
    folder (it raised for a missing one, and needed an argument)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its logdir, a new temp folder: the test's
    c = Counter({"lr": 2.0})
    assert (c.trial_name, c.trial_id) == ("default", "default")
    first = c.train()
    assert first["score"] == 2.0 and first["training_iteration"] == 1 and first["done"] is False
    assert first["pid"] == os.getpid() and first["config"] == {"lr": 2.0} and first["time_total_s"] >= 0
    where = c.save()
    assert os.path.isdir(where) and where.startswith(c.logdir) and c.logdir.startswith(str(tmp_path))
    c.train()
    named = c.save(str(tmp_path / "not" / "there" / "yet"))
    fresh = Counter({"lr": 2.0})
    fresh.restore(where)
    assert fresh.iteration == 1 and fresh.value == 2.0 and fresh.restored == 1
    fresh.restore(Checkpoint(named))
    assert fresh.iteration == 2 and fresh.value == 4.0


def _score_is_x(config):
    tune.report({"score": config["x"]})


def test_a_mode_without_a_metric_serves_get_best_result_later(storage):
    """Ray takes TuneConfig(mode=...) alone and the metric at get_best_result (muster refused the config)."""
    grid = tune.Tuner(_score_is_x, param_space={"x": tune.grid_search([1, 3, 2])},
                      tune_config=tune.TuneConfig(mode="max"),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.get_best_result(metric="score").config == {"x": 3}
    assert grid.get_best_result(metric="score", mode="min").config == {"x": 1}


class _ReportsItsResources(tune.Trainable):
    def step(self):
        return {"resources": self.trial_resources.required_resources, "done": True}


def test_a_trainable_knows_its_trial_resources(storage):
    """Ray's Trainable.trial_resources docstring: None outside a Tuner, the trial's resources inside
    (it was missing: AttributeError)."""
    assert _ReportsItsResources().trial_resources is None
    grid = tune.Tuner(tune.with_resources(_ReportsItsResources, {"cpu": 1, "memory": 0}),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert grid[0].metrics["resources"]["CPU"] == 1


def _reports_its_bundles(config):
    given = tune.get_context().get_trial_resources()
    tune.report({"bundles": given.bundles, "strategy": given.strategy, "head_cpus": given.head_cpus,
                 "required": given.required_resources})


class _ReportsItsBundles(tune.Trainable):
    def step(self):
        return {"bundles": self.trial_resources.bundles, "done": True}


def test_trial_resources_give_back_the_placement_group_factory(storage):
    """Ray's with_resources guide: a trial given PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]) sees that factory in
    get_trial_resources(), its bundles, strategy and head bundle (Ray 2.60); muster gave one summed bundle back,
    [{"CPU": 2.0}], so head_cpus said 2. A resources function that returns a factory, as for a Trainable class."""
    factory = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
    grid = tune.Tuner(tune.with_resources(_reports_its_bundles, factory),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    metrics = grid[0].metrics
    assert metrics["bundles"] == [{"CPU": 1}, {"CPU": 1}] and metrics["strategy"] == "SPREAD"
    assert metrics["head_cpus"] == 1 and metrics["required"] == {"CPU": 2}
    per_config = tune.with_resources(_ReportsItsBundles, lambda config: tune.PlacementGroupFactory(
        [{"CPU": 1}] + [{"CPU": 1}] * config["extra"]))
    grid = tune.Tuner(per_config, param_space={"extra": 2},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert grid[0].metrics["bundles"] == [{"CPU": 1}] * 3


def test_trial_logdir_names_local_path():
    """Ray's output guide's logger callback opens files under trial.logdir (Ray 2.60 replaced it by
    local_path and says so); before, a bare AttributeError named nothing."""
    import copy

    from muster.exceptions import UnsupportedRayAPIError
    from muster.tune.experiment import Trial

    trial = Trial("t1", "t_1", {"a": 1}, "/tmp/exp/t_1", {})
    with pytest.raises(UnsupportedRayAPIError, match=r"Trial\.logdir .*Trial\.local_path"):
        trial.logdir
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        trial.no_such_thing
    assert not hasattr(trial, "logdir") and copy.deepcopy(trial).config == {"a": 1}
    assert pickle.loads(pickle.dumps(trial)).local_path == trial.local_path


class _SizesItsTrials(_ReportsItsResources):
    @classmethod
    def default_resource_request(cls, config):
        from muster.tune.execution.placement_groups import PlacementGroupFactory

        return PlacementGroupFactory([{"CPU": config["cpus"]}])

    def setup(self, config):
        self.cleaned = []

    def cleanup(self):
        self.cleaned.append(True)


def test_a_trainable_class_sizes_its_trials_with_default_resource_request(storage):
    """Ray's resources guide: a Trainable overriding default_resource_request gets what it returns per trial
    (muster ignored it: every trial held 1 CPU); tune.with_resources on the class still wins."""
    grid = tune.Tuner(_SizesItsTrials, param_space={"cpus": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted((r.config["cpus"], r.metrics["resources"]["CPU"]) for r in grid) == [(1, 1), (2, 2)]
    grid = tune.Tuner(tune.with_resources(_SizesItsTrials, {"cpu": 1}), param_space={"cpus": 2},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid[0].metrics["resources"]["CPU"] == 1
    assert tune.Trainable.default_resource_request({}) is None and tune.Trainable.resource_help({}) == ""
    on_its_own = _SizesItsTrials({"cpus": 1})
    assert on_its_own.get_config() == {"cpus": 1}
    on_its_own.stop()  # Ray's way to release a Trainable used outside a Tuner: runs cleanup()
    assert on_its_own.cleaned == [True]

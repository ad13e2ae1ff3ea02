"""Ray Tune's class API, HyperBand, a logger callback and a define-by-run Optuna search, as Ray's docs write them."""

import muster as ray
from muster import tune
from muster.tune.logger import LoggerCallback
from muster.tune.schedulers import HyperBandScheduler
from muster.tune.search.optuna import OptunaSearch


class MyTrainable(tune.Trainable):
    def setup(self, config):
        self.x = 0.0
        self.rate = config["rate"]

    def step(self):
        self.x += self.rate
        return {"mean_accuracy": self.x, "done": self.iteration >= 8}

    def save_checkpoint(self, checkpoint_dir):
        return {"x": self.x}

    def load_checkpoint(self, checkpoint):
        self.x = checkpoint["x"]


class PrintLogger(LoggerCallback):
    def log_trial_end(self, trial, failed=False):
        print("trial ended:", trial.trial_id, "failed" if failed else "ok")


tuner = tune.Tuner(
    MyTrainable,
    param_space={"rate": tune.uniform(0.1, 1.0)},
    tune_config=tune.TuneConfig(num_samples=3, metric="mean_accuracy", mode="max",
                                scheduler=HyperBandScheduler(max_t=9, reduction_factor=3)),
    run_config=tune.RunConfig(stop={"done": True}, callbacks=[PrintLogger()], verbose=0),
)
results = tuner.fit()
print("best rate", results.get_best_result().config["rate"])


def objective(config):
    for step in range(3):
        tune.report({"loss": (config["x"] - 2) ** 2 + step * 0.0})


def define_by_run(trial):
    trial.suggest_float("x", -5, 5)
    if trial.suggest_categorical("use_offset", [True, False]):
        trial.suggest_float("offset", 0, 1)
    return {"label": "dbr"}


grid = tune.Tuner(
    objective,
    tune_config=tune.TuneConfig(num_samples=3, search_alg=OptunaSearch(space=define_by_run, metric="loss", mode="min")),
    run_config=tune.RunConfig(verbose=0),
).fit()
assert grid.num_errors == 0
print("best x", grid.get_best_result(metric="loss", mode="min").config["x"])
ray.shutdown()
print("OK")

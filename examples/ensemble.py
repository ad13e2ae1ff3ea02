"""Parallel ensemble training with tasks, and a Counter actor: the Ray Core guide's samples on muster.

The guide ("Distributed Machine Learning Training and Inference using Ray")
trains the members of a model ensemble as independent ``@ray.remote`` tasks,
one GPU each, to estimate uncertainty.  This is that program with ``ray``
replaced by ``muster``:

* ``trainer_fit`` is a task: each call trains one small MLP on its own seed
  and bootstrap sample and returns the trained weights.  It asks for
  ``num_gpus=1`` when this machine has a GPU and ``num_cpus=1`` otherwise;
  muster runs as many at once as there are GPUs (or CPUs) and starts the rest
  as those free up.
* The dataset is stored once with ``muster.put`` and every member gets the ref.
* The driver averages the members' predicted probabilities and prints each
  member's test accuracy, the ensemble's, and how much the members disagree on
  the points the ensemble gets wrong versus right (the uncertainty estimate).
* Then the guide's ``Counter`` actor: ten ``incr`` calls in submission order,
  state kept in one process, and ``muster.kill`` to release it.

Run it::

    python examples/ensemble.py                 # ~10 s on 2 cores
    python examples/ensemble.py --members 8 --epochs 40
"""

import argparse
import os
import time

import torch
import torch.nn as nn

import muster  # was: import ray

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--members", type=int, default=4, help="models in the ensemble")
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--samples", type=int, default=4000, help="dataset size (3/4 train, 1/4 test)")
args = parser.parse_args()

FEATURES = 10


def make_datasets(n: int, seed: int = 0) -> dict:
    """A noisy, non-linear binary problem: members trained on it differ, so averaging helps."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    score = torch.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] - 0.5 * x[:, 3] ** 2 + 0.3 * x[:, 4]
    score = score + 0.4 * torch.randn(n, generator=g)  # label noise: no member can be perfect
    y = (score > score.median()).long()
    cut = n * 3 // 4
    return {"train": (x[:cut], y[:cut]), "test": (x[cut:], y[cut:])}


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))


class Trainer:
    """Trains one ensemble member on a bootstrap sample of the training set."""

    def __init__(self, model_idx: int, model: nn.Module, datasets: dict, config: dict):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model_idx, self.model, self.config = model_idx, model.to(self.device), config
        x, y = datasets["train"]
        g = torch.Generator().manual_seed(1000 + model_idx)
        pick = torch.randint(len(x), (len(x),), generator=g)  # bootstrap: each member sees other data
        self.x, self.y = x[pick].to(self.device), y[pick].to(self.device)
        self.generator = g

    def fit(self) -> dict:
        opt = torch.optim.Adam(self.model.parameters(), lr=self.config["lr"])
        loss_fn = nn.CrossEntropyLoss()
        batch = self.config["batch_size"]
        for _ in range(self.config["epochs"]):
            order = torch.randperm(len(self.x), generator=self.generator).to(self.device)
            for i in range(0, len(order), batch):
                idx = order[i : i + batch]
                opt.zero_grad()
                loss_fn(self.model(self.x[idx]), self.y[idx]).backward()
                opt.step()
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}


# Training task: one GPU each when there is one (the guide's @ray.remote(num_gpus=1)).
@muster.remote
def trainer_fit(model_idx, model, datasets, config):
    start = time.time()
    trainer = Trainer(model_idx, model, datasets, config)
    weights = trainer.fit()
    return {"weights": weights, "seconds": time.time() - start, "pid": os.getpid(), "gpus": muster.get_gpu_ids()}


def accuracy(probs: torch.Tensor, y: torch.Tensor) -> float:
    return (probs.argmax(dim=1) == y).float().mean().item()


# ---------------------------------------------------------------- parallel ensemble training
has_gpu = torch.cuda.is_available()
per_member = {"num_gpus": 1} if has_gpu else {"num_cpus": 1}
datasets = make_datasets(args.samples)
config = {"epochs": args.epochs, "lr": 3e-3, "batch_size": 64}
models = [build_model(seed) for seed in range(args.members)]

muster.init()
print(f"engine: {muster.cluster_resources()}; each member asks for {per_member}")

try:  # the guide's first "common issue": a remote function needs .remote()
    trainer_fit(0, models[0], datasets, config)
except TypeError as err:
    print(f"calling trainer_fit(...) directly -> TypeError: {str(err).splitlines()[0]}")

start = time.time()
datasets_ref = muster.put(datasets)  # stored once; every member gets the same ref
futures = []
for model_idx, model in enumerate(models):
    future = trainer_fit.options(**per_member).remote(model_idx, model, datasets_ref, config)
    futures.append(future)
results = muster.get(futures)  # wait for every member (the guide's second "common issue")
wall = time.time() - start

x_test, y_test = datasets["test"]
member_probs = []
for model_idx, (model, result) in enumerate(zip(models, results)):
    model.load_state_dict(result["weights"])
    with torch.no_grad():
        probs = model(x_test).softmax(dim=1)
    member_probs.append(probs)
    where = f"GPU {result['gpus']}" if result["gpus"] else f"pid {result['pid']}"
    print(f"member {model_idx}: test accuracy {accuracy(probs, y_test):.3f}  "
          f"(trained in {result['seconds']:.1f} s, {where})")

stacked = torch.stack(member_probs)  # (members, points, classes)
ensemble = stacked.mean(dim=0)
member_accs = [accuracy(p, y_test) for p in member_probs]
spread = stacked[:, :, 1].std(dim=0)  # members' disagreement per test point
wrong = ensemble.argmax(dim=1) != y_test
print(f"mean member accuracy: {sum(member_accs) / len(member_accs):.3f}  best member: {max(member_accs):.3f}")
print(f"ensemble accuracy: {accuracy(ensemble, y_test):.3f}  ({args.members} members averaged)")
print(f"member disagreement (std of p): {spread[wrong].mean():.3f} on points the ensemble gets wrong, "
      f"{spread[~wrong].mean():.3f} on points it gets right")
print(f"trained {args.members} members in {wall:.1f} s wall, "
      f"{sum(r['seconds'] for r in results):.1f} s of training in total")

# ---------------------------------------------------------------- the Counter actor
# Define the Counter actor.
@muster.remote
class Counter:
    def __init__(self):
        self.i = 0

    def get(self):
        return self.i

    def incr(self, value):
        self.i += value


# Create a Counter actor.
c = Counter.remote()

# Submit calls to the actor. These calls run asynchronously but in
# submission order on the remote actor process.
for _ in range(10):
    c.incr.remote(1)

# Retrieve final actor state.
print(f"counter: {muster.get(c.get.remote())}")
# -> 10

muster.kill(c)  # an actor holds its resources until it is killed
muster.shutdown()

"""Train a model, then serve it over HTTP with batching -- Ray Train + Ray Serve, ported to muster.

Part 1 is the quickstart's training loop (``nn.Linear`` under DDP on 2 CPU
workers); rank 0 saves the weights in a checkpoint each epoch.  Part 2 serves
the final checkpoint with ``muster.serve`` exactly as Ray Serve would: a
deployment whose ``@serve.batch`` method runs the model on a batch of
requests at once, called over HTTP by many clients in parallel.

Run it::

    python examples/serve_model.py                 # ~15-30 s on 2 cores
    python examples/serve_model.py --epochs 3 --requests 200 --storage-path /tmp/muster_runs

Only the imports differ from Ray (``from ray import serve`` ->
``from muster import serve``).
"""

import argparse
import concurrent.futures
import os
import tempfile

import httpx
import torch
import torch.nn as nn
from starlette.requests import Request
from torch.utils.data import DataLoader, TensorDataset

from muster import serve, train  # was: from ray import serve, train
from muster.train import Checkpoint, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--num-samples", type=int, default=8_000)
parser.add_argument("--requests", type=int, default=64, help="HTTP requests to send to the served model")
parser.add_argument("--port", type=int, default=0, help="HTTP port (0: a free one)")
parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
args = parser.parse_args()

IN, OUT = 16, 2


def make_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(IN, OUT, generator=gen) / IN**0.5  # drawn first: the same function for every n
    X = torch.randn(n, IN, generator=gen)
    return X, X @ w + 0.05 * torch.randn(n, OUT, generator=gen)


def train_loop_per_worker(config):
    model = train.torch.prepare_model(nn.Linear(IN, OUT))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = train.torch.prepare_data_loader(DataLoader(TensorDataset(*make_data(config["n"])), batch_size=64))
    for epoch in range(config["epochs"]):
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item()
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if train.get_context().get_world_rank() == 0:
                torch.save(model.module.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            train.report({"loss": total / len(loader), "epoch": epoch}, checkpoint=checkpoint)


result = TorchTrainer(
    train_loop_per_worker,
    train_loop_config={"epochs": args.epochs, "n": args.num_samples},
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(storage_path=args.storage_path, verbose=0),
).fit()
print(f"trained: loss {result.metrics['loss']:.4f} after {result.metrics['epoch'] + 1} epochs")


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=32)
class LinearModel:
    def __init__(self, checkpoint: Checkpoint):
        self.model = nn.Linear(IN, OUT)
        with checkpoint.as_directory() as d:
            self.model.load_state_dict(torch.load(os.path.join(d, "model.pt")))
        self.model.eval()
        self.batch_sizes: list[int] = []

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def predict(self, inputs: list[list[float]]) -> list[dict]:
        self.batch_sizes.append(len(inputs))
        with torch.no_grad():
            out = self.model(torch.tensor(inputs))
        return [{"prediction": row, "batch_size": len(inputs)} for row in out.tolist()]

    async def __call__(self, request: Request) -> dict:
        return await self.predict((await request.json())["x"])


serve.start(http_options={"host": "127.0.0.1", "port": args.port})
serve.run(LinearModel.bind(result.checkpoint), name="linear", route_prefix="/predict")
port = serve.status().http["port"]

X, Y = make_data(args.requests)
with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda row: client.post("/predict", json={"x": row}).json(), X.tolist()))
predictions = torch.tensor([a["prediction"] for a in answers])
local = nn.Linear(IN, OUT)
with result.checkpoint.as_directory() as d:
    local.load_state_dict(torch.load(os.path.join(d, "model.pt")))
with torch.no_grad():
    gap = (predictions - local(X)).abs().max().item()
mse = nn.functional.mse_loss(predictions, Y).item()
print(f"served {len(answers)} predictions over HTTP on port {port}: mse {mse:.4f}, "
      f"largest batch {max(a['batch_size'] for a in answers)}, max gap to the checkpoint's model {gap:.1e}")
serve.shutdown()

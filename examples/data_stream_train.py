"""Ray Data's "Streaming Preprocessing" sample, run with muster.

The sample from "Ray Train, Serve and Data: an overview" with ``ray``
replaced by ``muster``: ``read_parquet`` -> ``map`` (lower-case the text) ->
``filter`` (texts longer than 10 characters) -> ``TorchTrainer(...,
datasets={"train": ds})`` -> in the loop, ``get_dataset_shard("train")
.iter_torch_batches(batch_size=64)``.

Differences from the sample, all outside the ported lines:

* the parquet files are generated here (short reviews whose label says
  whether they are positive) instead of read from ``s3://my-bucket``;
* strings cannot become tensors (in Ray either), so one ``map_batches``
  turns ``text`` into fixed-length hashed token ids before training;
* ``random_shuffle(seed=0)`` gives a new order every epoch;
* it runs on 2 CPU workers of this machine (``use_gpu=False``).

Run it::

    python examples/data_stream_train.py              # ~15 s on 2 cores
    python examples/data_stream_train.py --epochs 3 --storage-path /tmp/muster_runs
"""

import argparse
import os
import random
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

import muster  # was: import ray
import muster.data  # was: import ray.data
from muster import train  # was: from ray import train
from muster.train import RunConfig, ScalingConfig  # was: from ray.train import ScalingConfig
from muster.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--rows", type=int, default=6000)
parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
args = parser.parse_args()

VOCAB, SEQ = 512, 16
GOOD = ["Great", "loved it", "Excellent", "would buy AGAIN", "superb"]
BAD = ["Awful", "hated it", "Broken", "never again", "Terrible"]


def make_parquet(folder: str, rows: int) -> None:
    """Reviews in 4 files: a positive or negative phrase plus filler; some are too short."""
    rng = random.Random(0)
    for part in range(4):
        texts, labels = [], []
        for _ in range(rows // 4):
            label = rng.random() < 0.5
            words = [rng.choice(GOOD if label else BAD)] + rng.sample(["the", "box", "item", "was", "ok", "A"], 3)
            rng.shuffle(words)
            texts.append(" ".join(words) if rng.random() > 0.1 else "ok")  # ~10% too short: filtered out
            labels.append(int(label))
        pq.write_table(pa.table({"text": texts, "label": labels}), os.path.join(folder, f"part-{part}.parquet"))


def tokenize(batch):
    """Hashed word ids, padded to SEQ (strings cannot become tensors)."""
    ids = np.zeros((len(batch["text"]), SEQ), dtype=np.int64)
    for i, text in enumerate(batch["text"]):
        for j, word in enumerate(text.split()[:SEQ]):
            ids[i, j] = 1 + sum(map(ord, word)) * 2654435761 % (VOCAB - 1)
    return {"text": ids, "label": batch["label"]}


def train_func():
    torch.manual_seed(0)  # the same initial weights every run (workers draw fresh seeds otherwise)
    model = train.torch.prepare_model(torch.nn.EmbeddingBag(VOCAB, 2, padding_idx=0))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    train_ds = train.get_dataset_shard("train")
    for epoch in range(args.epochs):
        total, correct, rows = 0.0, 0, 0
        for batch in train_ds.iter_torch_batches(batch_size=64):
            # batch is a dict of tensors
            inputs = batch["text"]
            labels = batch["label"]
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(labels)
            correct += int((logits.argmax(1) == labels).sum())
            rows += len(labels)
        train.report({"epoch": epoch, "loss": total / rows, "accuracy": correct / rows, "rows": rows})


with tempfile.TemporaryDirectory() as data_dir:
    make_parquet(data_dir, args.rows)

    ds = muster.data.read_parquet(data_dir)  # was: ray.data.read_parquet("s3://my-bucket/training-data/")

    ds = ds.map(lambda row: {"text": row["text"].lower(), "label": row["label"]})
    ds = ds.filter(lambda row: len(row["text"]) > 10)
    ds = ds.random_shuffle(seed=0).map_batches(tokenize)

    # Stream directly to training workers
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=False),
        datasets={"train": ds},
        run_config=RunConfig(storage_path=args.storage_path),
    )
    result = trainer.fit()

history = result.metrics_dataframe
for _, row in history.iterrows():
    print(f"epoch {int(row['epoch'])}: loss={row['loss']:.4f} accuracy={row['accuracy']:.3f} rows/rank={int(row['rows'])}")
print(f"Final accuracy: {result.metrics['accuracy']:.3f}")

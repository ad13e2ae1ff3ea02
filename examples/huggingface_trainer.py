"""A transformers.Trainer on 2 workers, with a killed worker and a mid-epoch resume.

A tiny GPT-2 is built from a config (no downloads) and trained as a causal
language model on synthetic token sequences. The single-machine script gains
three lines: ``trainer.add_callback(RayTrainReportCallback())``,
``prepare_trainer(trainer)``, and ``resume_from_checkpoint`` from
``train.get_checkpoint()``. The callback reports the log history with every
checkpoint the Trainer saves; rank 1 is killed with SIGKILL once after step
5, and the new gang resumes from the step-4 checkpoint, mid-epoch.

Run it::

    python examples/huggingface_trainer.py
    python examples/huggingface_trainer.py --max-steps 40 --no-crash --storage-path /tmp/muster_runs
"""

import argparse
import os
import signal
import tempfile

import torch
import transformers

from muster import train  # was: from ray import train
from muster.train import FailureConfig, RunConfig, ScalingConfig  # was: from ray.train import ...
from muster.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer  # was: ray.train.huggingface...
from muster.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer


class Sequences(torch.utils.data.Dataset):
    """Token sequences that count upwards modulo the vocabulary: easy to learn."""

    def __init__(self, rows=512, length=16, vocab=64):
        g = torch.Generator().manual_seed(0)
        starts = torch.randint(0, vocab, (rows, 1), generator=g)
        self.ids = (starts + torch.arange(length)) % vocab

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _KillAfterStep(transformers.TrainerCallback):
    """The injected fault: SIGKILL this worker once after one step."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            print(f"Killing rank 1 with SIGKILL after step {self.step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def train_func(config):
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    )
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"],
        max_steps=config["max_steps"],
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        logging_steps=2,
        save_strategy="steps",
        save_steps=4,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),  # on CPU, Accelerate trains distributed only with use_cpu=True
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Sequences())
    trainer.add_callback(RayTrainReportCallback())
    ctx = train.get_context()
    if config["crash"] and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
        trainer.add_callback(_KillAfterStep(5))
    trainer = prepare_trainer(trainer)
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            if ctx.get_world_rank() == 0:
                print(f"Resuming from {checkpoint} (attempt {ctx.get_attempt()})", flush=True)
            trainer.train(resume_from_checkpoint=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--no-crash", action="store_true", help="do not kill a worker")
    parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as output_dir:  # the Trainer's own scratch folder
        result = TorchTrainer(
            train_func,
            train_loop_config={"output_dir": output_dir, "max_steps": args.max_steps, "crash": not args.no_crash},
            scaling_config=ScalingConfig(num_workers=args.num_workers),
            run_config=RunConfig(storage_path=args.storage_path, failure_config=FailureConfig(max_failures=1)),
        ).fit()
    for row in result.metrics_dataframe.itertuples():
        print(f"step {int(row.step)}: loss={row.loss:.4f}")
    print(f"Final loss: {result.metrics['loss']:.4f}")
    print(f"Checkpoint: {result.checkpoint}")

"""A transformers.Trainer (a tiny GPT-2 built from a config: no downloads) on 2
muster workers: trains, reports on every save with the checkpoint, is SIGKILLed
mid-epoch and resumes with resume_from_checkpoint."""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

MAX_STEPS, SAVE_STEPS = 6, 2


class Tokens(torch.utils.data.Dataset):
    def __init__(self, rows: int = 64):
        g = torch.Generator().manual_seed(5)
        self.ids = torch.randint(0, 32, (rows, 8), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def hf_loop(config):
    import signal

    import muster.train as train
    from muster.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    class KillAt(transformers.TrainerCallback):  # the fault: SIGKILL rank 1 after a committed save
        def on_step_end(self, args, state, control, **kwargs):
            ctx = train.get_context()
            if ctx.get_attempt() == 0 and ctx.get_world_rank() == 1 and state.global_step == config.get("kill_at"):
                os.kill(os.getpid(), signal.SIGKILL)

    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    )
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"], max_steps=MAX_STEPS, per_device_train_batch_size=4, learning_rate=5e-3,
        logging_steps=1, save_strategy="steps", save_steps=SAVE_STEPS, report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[KillAt()])
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as folder:
            trainer.train(resume_from_checkpoint=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()
    if trainer.args.process_index == 0:
        torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, config["out"])


def test_transformers_trainer_killed_mid_run_resumes_from_the_reported_checkpoint(trainer, tmp_path):
    clean = trainer(hf_loop, {"output_dir": str(tmp_path / "hf_clean"), "out": str(tmp_path / "clean.pt")},
                    name="clean").fit()
    killed = trainer(hf_loop, {"output_dir": str(tmp_path / "hf_killed"), "out": str(tmp_path / "killed.pt"),
                               "kill_at": 3}, name="killed", max_failures=1).fit()

    rows = killed.all_reports
    # Saves at steps 2, 4, 6; rank 1 dies at step 3, the second attempt resumes from step 2.
    assert sorted((r["_attempt"], r["_rank"], r["step"]) for r in rows) == [
        (0, 0, 2), (0, 1, 2), (1, 0, 4), (1, 0, 6), (1, 1, 4), (1, 1, 6)
    ]
    assert all("loss" in r and "learning_rate" in r for r in rows)
    files = set(os.listdir(os.path.join(killed.checkpoint.path, "checkpoint")))
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"} <= files
    assert {"model.safetensors", "config.json"} & files

    # 64 rows / (2 workers x 4) = 8 steps per epoch: the resume at step 2 was mid-epoch.
    a, b = torch.load(tmp_path / "clean.pt"), torch.load(tmp_path / "killed.pt")
    for key, value in a.items():
        assert torch.allclose(value, b[key], atol=1e-6), f"{key} differs after resume"
    assert clean.metrics["step"] == killed.metrics["step"] == MAX_STEPS
    assert clean.metrics["loss"] == pytest.approx(killed.metrics["loss"], abs=1e-5)


def no_callback_loop():
    from muster.train.huggingface.transformers import prepare_trainer

    args = transformers.TrainingArguments(output_dir="/tmp/unused", report_to=[], use_cpu=True)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_layer=1,
                                                                 n_head=1))
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_trainer(transformers.Trainer(model=model, args=args))
    import muster.train as train

    train.report({"warned": any("has no MusterTrainReportCallback" in str(w.message) for w in caught)})


def test_prepare_trainer_warns_without_the_report_callback(trainer):
    assert trainer(no_callback_loop, None, workers=1).fit().metrics["warned"] is True

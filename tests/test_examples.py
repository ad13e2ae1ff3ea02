"""Run every script in examples/ as a user would: a real subprocess, short settings.

Each example starts its own engine and workers, so these are end-to-end
checks of the public API the scripts use (TorchTrainer, report, checkpoints,
FailureConfig restarts, CheckpointConfig retention, Result).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# Each example takes ~8-15 s on an idle 2-core machine; the limits leave room for a busy one.
pytestmark = pytest.mark.timeout(200)


def run_example(script: str, storage: Path, *args: str, timeout: float = 180) -> str:
    """Run ``examples/<script>``; return its stdout+stderr after checking it exited 0 and left no process behind."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, MUSTER_PLAIN_PROGRESS="1", MUSTER_EXAMPLE_TEST_TAG=tag)
    env.pop("MUSTER_STORAGE_PATH", None)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--storage-path", str(storage), *args],
        cwd=EXAMPLES.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{output}"
    assert_no_leftovers(tag, script)
    return output


def assert_no_leftovers(tag: str, script: str) -> None:
    """The engine and workers the example started (they inherit its environment) must be gone."""
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in psutil.process_iter(["pid"]) if _has_tag(p, tag)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p in left:
        p.kill()
    assert not left, f"{script} left processes running: {[(p.pid, p.info) for p in left]}"


def _has_tag(p: psutil.Process, tag: str) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE and p.environ().get("MUSTER_EXAMPLE_TEST_TAG") == tag
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def run_dirs(storage: Path) -> list[Path]:
    return [p for p in storage.iterdir() if p.is_dir() and not p.name.startswith(".")]  # .muster: the run store


def checkpoint_dirs(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("checkpoint_*"))


def test_quickstart(tmp_path):
    out = run_example("quickstart.py", tmp_path, "--epochs", "2", "--num-samples", "4000")
    # live progress: a line per epoch, then the tutorial's final line
    losses = [float(x) for x in re.findall(r"\[muster\] iter \d+ \| loss=([0-9.e+-]+) epoch=", out)]
    assert len(losses) == 2, out
    final = float(re.search(r"^Final loss: (\d+\.\d{4})$", out, re.M).group(1))
    assert final == pytest.approx(losses[-1], abs=1e-4)
    assert final < losses[0], out
    assert re.search(r"\[muster\] run '.*' finished after", out), out
    assert len(run_dirs(tmp_path)) == 1


def test_linear_checkpoint_resume(tmp_path):
    out = run_example("linear_checkpoint_resume.py", tmp_path, "--epochs", "2", "--num-samples", "4000")
    # the failure, the restart from the committed checkpoint, and the resumed loop
    assert "Simulating a worker crash in epoch 1 (raise)" in out, out
    assert "failed: RuntimeError: simulated worker failure in epoch 1; restarting from checkpoint_000001" in out, out
    assert "Resumed from checkpoint (attempt 1): epochs 0-0 were done, continuing at epoch 1" in out, out
    assert "Attempt 0 (first attempt): epochs 0-0" in out, out
    assert "Attempt 1 (restart 1): epochs 1-1" in out, out
    assert "Training resumed from the checkpoint of epoch 0 after the crash in epoch 1" in out, out
    assert re.search(r"^Final loss: \d+\.\d{4}$", out, re.M), out
    # the tutorial's verification block
    (run_dir,) = run_dirs(tmp_path)
    assert f"Best checkpoint path: Checkpoint(filesystem=local, path={run_dir}/checkpoint_000002)" in out, out
    table = out[out.index("Metrics:"):]
    assert re.search(r"^0\s+0\s+\d", table, re.M) and re.search(r"^1\s+1\s+\d", table, re.M), table
    assert checkpoint_dirs(run_dir) == ["checkpoint_000001", "checkpoint_000002"]


def test_cnn_classifier(tmp_path):
    out = run_example("cnn_classifier.py", tmp_path, "--epochs", "3")
    val_losses = [float(v) for v in re.findall(r"\[muster\] iter \d+ \|.* val_loss=([0-9.e+-]+) accuracy=", out)]
    assert len(val_losses) == 3, out
    final = re.search(r"^Final: loss=[0-9.]+ val_loss=[0-9.]+ accuracy=([0-9.]+) \(chance: 0\.100\)$", out, re.M)
    assert final, out
    assert float(final.group(1)) > 0.5, f"accuracy should be well above chance (0.1):\n{out}"
    # retention: the 2 best by val_loss, plus the latest, are kept; the others deleted
    (run_dir,) = run_dirs(tmp_path)
    best_two = sorted(range(3), key=lambda e: val_losses[e])[:2]
    expected = sorted(f"checkpoint_{e + 1:06d}" for e in set(best_two) | {2})
    assert checkpoint_dirs(run_dir) == expected, out
    kept = re.findall(r"^  epoch (\d+): val_loss=[0-9.]+ accuracy=([0-9.]+)  ", out, re.M)
    assert sorted(f"checkpoint_{int(e) + 1:06d}" for e, _ in kept) == expected, out
    # the best checkpoint loads back outside the workers and scores what was reported
    best_epoch, best_acc = kept[0]
    assert int(best_epoch) == min(range(3), key=lambda e: val_losses[e]), out
    reloaded = re.search(r"^Best checkpoint \(epoch (\d+)\) reloaded: val_loss=[0-9.]+ accuracy=([0-9.]+)$", out, re.M)
    assert reloaded and reloaded.groups() == (best_epoch, best_acc), out


def test_tune_asha(tmp_path):
    out = run_example("tune_asha.py", tmp_path, "--num-samples", "4", "--epochs", "3")
    best = re.search(r"^Best hyperparameters: \{'train_loop_config': \{'lr': ([0-9.e-]+), 'batch_size': (\d+)",
                     out, re.M)
    assert best and 1e-4 <= float(best.group(1)) <= 1e-1 and int(best.group(2)) in (32, 64, 128), out
    run, total = map(int, re.search(r"^Epochs run: (\d+) of (\d+) \(4 trials, 0 errors\)", out, re.M).groups())
    assert 4 <= run <= total == 12, out
    assert re.search(r"\[muster.tune\] experiment '.*' done after .*: 4 TERMINATED, best loss=", out), out
    (experiment,) = run_dirs(tmp_path)
    assert len([p for p in experiment.iterdir() if p.is_dir()]) == 4


def test_lightning_ddp(tmp_path):
    pytest.importorskip("lightning")
    out = run_example("lightning_ddp.py", tmp_path, "--epochs", "3")
    assert "Killing rank 1 with SIGKILL after epoch 1" in out, out
    assert re.search(r"restarting from checkpoint_000002", out), out
    assert "Restored all states from the checkpoint at" in out, out  # Lightning itself resumed from ckpt_path
    epochs = re.findall(r"^epoch (\d): train_loss=([0-9.]+) val_loss=([0-9.]+)$", out, re.M)
    assert [e for e, _, _ in epochs] == ["0", "1", "2"], out
    assert float(epochs[-1][2]) < float(epochs[0][2]), out
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "checkpoint_000003" / "checkpoint.ckpt").is_file()


def test_huggingface_trainer(tmp_path):
    pytest.importorskip("transformers")
    out = run_example("huggingface_trainer.py", tmp_path, "--max-steps", "12")
    assert "Killing rank 1 with SIGKILL after step 5" in out, out
    assert "restarting from checkpoint_000001" in out, out
    steps = re.findall(r"^step (\d+): loss=([0-9.]+)$", out, re.M)
    assert [s for s, _ in steps] == ["4", "8", "12"], out
    assert float(steps[-1][1]) < float(steps[0][1]), out
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "checkpoint_000003" / "checkpoint" / "trainer_state.json").is_file()


def test_fsdp_sharded(tmp_path):
    out = run_example("fsdp_sharded.py", tmp_path, "--epochs", "3")
    assert "Killing rank 1 with SIGKILL after epoch 1" in out, out
    resumed = r"Resumed from Checkpoint\(filesystem=local, path=.*checkpoint_000002\) on 2 workers, at epoch 2"
    assert re.search(resumed, out), out
    accuracy = float(re.search(r"^Final accuracy \(rank 0's shard\): ([0-9.]+)$", out, re.M).group(1))
    assert accuracy > 0.8, out
    assert "'__0_0.distcp', '__1_0.distcp'" in out, out


def test_data_stream_train(tmp_path):
    out = run_example("data_stream_train.py", tmp_path, "--epochs", "2", "--rows", "2000")
    epochs = re.findall(r"^epoch (\d): loss=([0-9.]+) accuracy=([0-9.]+) rows/rank=(\d+)$", out, re.M)
    assert [e for e, *_ in epochs] == ["0", "1"], out
    assert float(epochs[-1][1]) < float(epochs[0][1]), out  # the loss falls
    assert len({rows for *_, rows in epochs}) == 1 and 700 < int(epochs[0][3]) < 1000, out  # ~10% filtered, 2 ranks
    assert float(re.search(r"^Final accuracy: ([0-9.]+)$", out, re.M).group(1)) > 0.8, out


def test_serve_model(tmp_path):
    out = run_example("serve_model.py", tmp_path, "--epochs", "2", "--num-samples", "2000", "--requests", "48")
    trained = float(re.search(r"^trained: loss (\d+\.\d+) after 2 epochs$", out, re.M).group(1))
    m = re.search(r"^served 48 predictions over HTTP on port \d+: mse (\d+\.\d+), largest batch (\d+), "
                  r"max gap to the checkpoint's model (\S+)$", out, re.M)
    assert m, out
    assert float(m.group(3)) < 1e-4  # the replicas serve the trained checkpoint
    assert float(m.group(1)) < trained * 2 + 0.1  # and it predicts as well as training said
    assert int(m.group(2)) > 1  # concurrent requests were batched

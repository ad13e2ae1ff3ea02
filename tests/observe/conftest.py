"""Real runs recorded once for the observability tests, a dashboard server, and a headless browser."""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from _shared import Dashboard

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SLOW_BATCH_S = 0.03  # rank 1's loader is this much slower per batch: the straggler to find


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """One finished 2-worker run that failed once (SIGKILL) and resumed: its storage path and Result."""
    from muster.train import FailureConfig, RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def recorded_loop(config):
        """Six epochs over a prepared loader; rank 1's batches arrive slowly; rank 1 is SIGKILLed once."""
        import signal
        import tempfile
        import time

        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, TensorDataset

        import muster.train as train
        from muster.train import Checkpoint
        from muster.train.torch import prepare_data_loader

        rank = train.get_context().get_world_rank()

        def collate(items):
            if rank == 1:
                time.sleep(SLOW_BATCH_S)
            return torch.stack([x for (x,) in items])

        loader = prepare_data_loader(DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=2, collate_fn=collate))
        start = 0
        if train.get_checkpoint() is not None:
            with train.get_checkpoint().as_directory() as folder:
                start = int(open(os.path.join(folder, "epoch")).read()) + 1
        for epoch in range(start, 6):
            total = sum(float(batch.sum()) for batch in loader)
            dist.barrier()
            print(f"epoch {epoch} done on rank {rank}", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                open(os.path.join(tmp, "epoch"), "w").write(str(epoch))
                train.report({"loss": 1.0 / (epoch + 1) + rank * 0.01, "total": total},
                             checkpoint=Checkpoint.from_directory(tmp) if rank == 0 else None)
            if rank == 1 and epoch == 1 and not os.path.exists(config["marker"]):
                open(config["marker"], "w").close()
                os.kill(os.getpid(), signal.SIGKILL)

    base = tmp_path_factory.mktemp("recorded")
    storage = str(base / "results")
    result = TorchTrainer(
        recorded_loop,
        train_loop_config={"marker": str(base / "killed")},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="recorded", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    return {"storage": storage, "name": "recorded", "result": result}


@pytest.fixture(scope="session")
def tuned(tmp_path_factory):
    """A finished Tune experiment of four trials (a grid over lr): its storage path and ResultGrid."""
    from muster import tune

    def tune_trainable(config):
        for step in range(4):
            print(f"lr={config['lr']} step {step}", flush=True)
            tune.report({"loss": (config["lr"] - 0.05) ** 2 + 0.01 / (step + 1)})

    storage = str(tmp_path_factory.mktemp("tuned") / "results")
    grid = tune.Tuner(
        tune_trainable,
        param_space={"lr": tune.grid_search([0.01, 0.03, 0.05, 0.1])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
        run_config=tune.RunConfig(name="lr_search", storage_path=storage, verbose=0),
    ).fit()
    return {"storage": storage, "experiment": "lr_search", "grid": grid}


class LiveRun:
    """A TorchTrainer run on a background thread that holds after ``hold_at`` steps until ``release()``."""

    def __init__(self, storage: str, name: str, steps: int, hold_at: int, workers: int, go: str):
        from muster.train import RunConfig, ScalingConfig
        from muster.train.torch import TorchTrainer

        def live_loop(config):
            import time

            import muster.train as train

            for step in range(config["steps"]):
                if step == config["hold_at"]:
                    while not os.path.exists(config["go"]):  # held open until the test has looked
                        time.sleep(0.05)
                print(f"live step {step}", flush=True)
                train.report({"loss": 1.0 / (step + 1), "accuracy": step / config["steps"]})

        self.storage, self.name, self.go = storage, name, go
        config = {"steps": steps, "hold_at": hold_at, "go": go}
        self.trainer = TorchTrainer(live_loop, train_loop_config=config,
                                    scaling_config=ScalingConfig(num_workers=workers),
                                    run_config=RunConfig(name=name, storage_path=storage, verbose=0))
        self.result = None
        self.thread = threading.Thread(target=self._fit, daemon=True)
        self.thread.start()

    def _fit(self) -> None:
        self.result = self.trainer.fit()

    def wait_for_reports(self, n: int, timeout: float = 60.0) -> dict:
        """The run's store row once it has ``n`` reports (all ranks)."""
        import time

        from muster.observe.store.reader import StoreNotFoundError, StoreReader

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                run = StoreReader.for_root(self.storage).find_run(self.name)
            except StoreNotFoundError:
                run = None
            if run and run["reports"] >= n:
                return run
            time.sleep(0.1)
        raise AssertionError(f"run {self.name!r} did not reach {n} reports in {timeout} s")

    def release(self) -> None:
        open(self.go, "a").close()


@pytest.fixture
def live_run(storage, tmp_path):
    """``live_run(name, steps, hold_at, workers)``: start a held run; it is released and joined at the end."""
    runs: list[LiveRun] = []

    def start(name: str = "live", steps: int = 6, hold_at: int = 3, workers: int = 2) -> LiveRun:
        run = LiveRun(storage, name, steps, hold_at, workers, str(tmp_path / f"{name}.go"))
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.release()
        run.thread.join(120)


@pytest.fixture
def dashboard():
    """``dashboard(storage, *args)`` starts a server; all are stopped at the end of the test."""
    started: list[Dashboard] = []

    def start(storage: str, *args: str) -> Dashboard:
        d = Dashboard(storage, *args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def chromium():
    """Headless Debian chromium driven by playwright (no browser download). Per module: playwright's sync API
    keeps an asyncio loop running on the main thread while open, and later tests call asyncio.run()."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (`apt-get install chromium`; .ci/run does this)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    """A fresh browser page; the test fails if the page raised a script error."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.set_default_timeout(30_000)
    yield page
    context.close()
    assert not page.errors, page.errors


@pytest.fixture
def screenshots(tmp_path):
    """Where a test saves its screenshots (and MUSTER_SCREENSHOTS_DIR too, to refresh docs/images)."""
    def save(page, name: str) -> str:
        path = str(tmp_path / f"{name}.png")
        page.screenshot(path=path, full_page=True)
        extra = os.environ.get("MUSTER_SCREENSHOTS_DIR")
        if extra:
            os.makedirs(extra, exist_ok=True)
            shutil.copy(path, os.path.join(extra, f"{name}.png"))
        return path

    return save

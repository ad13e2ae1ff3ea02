"""The dashboard in a real browser (headless chromium): a finished run, a live one, a Tune experiment."""

from __future__ import annotations

import os
import threading
import time

import pytest

from muster.observe.store.reader import StoreNotFoundError, StoreReader

pytest.importorskip("starlette")


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.set_default_timeout(30_000)
    yield page
    context.close()
    assert not page.errors, page.errors


def test_finished_run(recorded, dashboard, page, screenshots):
    d = dashboard(recorded["storage"])
    page.goto(d.base)
    row = page.wait_for_selector("#runs tr[data-run]")
    assert "recorded" in row.inner_text() and "FINISHED" in row.inner_text()
    screenshots(page, "dashboard-runs")
    page.click("#runs tr[data-run] a")
    page.wait_for_selector("#workers tr[data-rank='1']")
    page.wait_for_selector("#logs:has-text('epoch 5 done on rank 1')")
    assert page.inner_text("#run-title").split() == ["recorded", "FINISHED"]
    workers = page.query_selector_all("#workers tr[data-rank]")
    assert [w.get_attribute("data-rank") for w in workers] == ["0", "1"]
    assert "STRAGGLER" in workers[1].inner_text() and "on data" in workers[1].inner_text()
    assert "STRAGGLER" not in workers[0].inner_text()
    # one chart per metric, every rank overlaid, and the timing and resource charts
    for chart in ("#metric-loss", "#metric-total", "#chart-step", "#chart-wait", "#chart-cpu", "#chart-rss"):
        assert page.query_selector(f"{chart} canvas") is not None, chart
    assert page.inner_text("#metric-loss .u-legend").count("rank") == 2
    events = page.inner_text("#events")
    assert "failure" in events and "rank 1" in events and "SIGKILL" in events and "restart" in events
    assert page.query_selector("#events li.k-failure") is not None
    assert "checkpoint_000006" in page.inner_text("#checkpoints")
    page.select_option("#log-rank", "1")
    page.wait_for_function("!document.querySelector('#logs').textContent.includes('(rank 0')")
    assert "(rank 1," in page.inner_text("#logs")
    screenshots(page, "dashboard-run")


def live_loop(config):
    import muster.train as train

    for step in range(6):
        if step == 3:
            while not os.path.exists(config["go"]):  # hold the run open until the test has looked
                time.sleep(0.05)
        print(f"live step {step}", flush=True)
        train.report({"loss": 1.0 / (step + 1), "accuracy": step / 6})


def _wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_live_run_updates_in_place(storage, tmp_path, dashboard, page, screenshots):
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    go = str(tmp_path / "go")
    trainer = TorchTrainer(live_loop, train_loop_config={"go": go}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="live", storage_path=storage, verbose=0))
    outcome: dict = {}
    fit = threading.Thread(target=lambda: outcome.setdefault("result", trainer.fit()), daemon=True)
    fit.start()
    try:
        def three_steps():
            try:
                run = StoreReader.for_root(storage).find_run("live")
            except StoreNotFoundError:
                return None
            return run if run and run["reports"] >= 6 else None

        run = _wait(three_steps, "the live run's first reports")
        d = dashboard(storage)
        page.goto(f"{d.base}#/run/{run['id']}")
        page.wait_for_selector("#run-title .s-RUNNING")
        page.wait_for_selector("#live:has-text('live')")
        page.wait_for_selector("#metric-accuracy canvas")
        assert [w.get_attribute("data-rank") for w in page.query_selector_all("#workers tr[data-rank]")] == ["0", "1"]
        assert "ALIVE" in page.inner_text("#workers")
        assert "live step 2" in page.inner_text("#logs") and "live step 3" not in page.inner_text("#logs")
        screenshots(page, "dashboard-live")
        open(go, "w").close()
        # no reload: the page polls and shows the end of the run by itself
        page.wait_for_selector("#run-title .s-FINISHED", timeout=60_000)
        page.wait_for_selector("#logs:has-text('live step 5')")
        assert "FINISHED" in page.inner_text("#workers") and page.inner_text("#live") == ""
        assert "finish" in page.inner_text("#events")
    finally:
        open(go, "w").close()
        fit.join(120)
    assert outcome["result"].metrics["loss"] == pytest.approx(1 / 6)


def test_tune_page(tuned, dashboard, page, screenshots):
    d = dashboard(tuned["storage"])
    page.goto(d.base + "#/experiments")
    row = page.wait_for_selector("#experiments a")
    assert row.inner_text() == "lr_search"
    row.click()
    page.wait_for_selector("#trial-table tr[data-trial]")
    trials = page.query_selector_all("#trial-table tr[data-trial]")
    assert len(trials) == 4
    assert sorted(float(t.query_selector_all("td")[3].inner_text()) for t in trials) == [0.01, 0.03, 0.05, 0.1]
    assert page.input_value("#exp-metric") == "loss" and page.input_value("#exp-param") == "lr"
    assert page.query_selector("#chart-configs canvas") is not None
    assert "loss against lr" in page.inner_text("#chart-configs")
    assert "min" in page.inner_text("#exp-summary")  # metric and mode from experiment_state.json
    best = page.query_selector("#trial-table tr:has(.best)")
    assert float(best.query_selector_all("td")[3].inner_text()) == 0.05  # lowest loss
    screenshots(page, "dashboard-tune")
    trials[0].query_selector("a").click()  # a trial is an ordinary run
    page.wait_for_selector("#run-title .s-FINISHED")
    assert "lr_search" in page.inner_text("#summary")

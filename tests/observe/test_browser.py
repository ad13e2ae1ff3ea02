"""The dashboard in a real browser (headless chromium): a finished run, a live one, a Tune experiment."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")


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


def test_live_run_updates_in_place(live_run, dashboard, page, screenshots):
    live = live_run("live", steps=6, hold_at=3, workers=2)
    run = live.wait_for_reports(6)  # three steps of two ranks, then it holds
    d = dashboard(live.storage)
    page.goto(f"{d.base}#/run/{run['id']}")
    page.wait_for_selector("#run-title .s-RUNNING")
    page.wait_for_selector("#live:has-text('live')")
    page.wait_for_selector("#metric-accuracy canvas")
    assert [w.get_attribute("data-rank") for w in page.query_selector_all("#workers tr[data-rank]")] == ["0", "1"]
    assert "ALIVE" in page.inner_text("#workers")
    assert "live step 2" in page.inner_text("#logs") and "live step 3" not in page.inner_text("#logs")
    screenshots(page, "dashboard-live")
    live.release()
    # no reload: the page polls and shows the end of the run by itself
    page.wait_for_selector("#run-title .s-FINISHED", timeout=60_000)
    page.wait_for_selector("#logs:has-text('live step 5')")
    assert "FINISHED" in page.inner_text("#workers") and page.inner_text("#live") == ""
    assert "finish" in page.inner_text("#events")
    live.thread.join(60)
    assert live.result.metrics["loss"] == pytest.approx(1 / 6)


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

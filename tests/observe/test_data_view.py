"""muster.data's live view inside a training run: per-operator rows in the run store (``data_ops``), the
dashboard's Data panel (API and page), and the training view's data line."""

from __future__ import annotations

import httpx
import pytest

ROWS = 240


class Scale:
    """A callable class with concurrency=: in a training worker it runs in the worker's threads."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, batch):
        return {"id": batch["id"], "y": batch["id"] * self.factor}


@pytest.fixture(scope="module")
def data_run(tmp_path_factory):
    """A finished 2-worker run whose workers each read one pass of a mapped dataset."""
    import cloudpickle

    import muster.data as md
    import muster.train as train
    from muster.train import DataConfig, RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def data_loop():
        shard = train.get_dataset_shard("train")
        total = sum(float(b["y"].sum()) for b in shard.iter_torch_batches(batch_size=16))
        train.report({"total": total})

    import sys

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        ds = (md.range(ROWS, override_num_blocks=8).map_batches(Scale, fn_constructor_args=(2,), concurrency=2)
              .filter(lambda r: r["id"] % 3 != 0))
        storage = str(tmp_path_factory.mktemp("data_run") / "results")
        result = TorchTrainer(data_loop, scaling_config=ScalingConfig(num_workers=2),
                              run_config=RunConfig(name="with_data", storage_path=storage, verbose=0),
                              datasets={"train": ds}, dataset_config=DataConfig(datasets_to_split=[])).fit()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    return {"storage": storage, "result": result}


def _run_id(storage):
    from muster.observe.store.reader import StoreReader

    reader = StoreReader.for_root(storage)
    return reader, reader.find_run("with_data")["id"]


def test_store_gets_per_operator_rows_from_the_workers(data_run):
    want = sum(2.0 * i for i in range(ROWS) if i % 3)
    assert [r["total"] for r in data_run["result"].all_reports] == [want, want]  # unsplit: all rows each
    reader, run_id = _run_id(data_run["storage"])
    latest = reader.data_ops_latest(run_id)
    by = {(r["rank"], r["op"]): r for r in latest}
    kept = sum(1 for i in range(ROWS) if i % 3)
    for rank in (0, 1):
        read, scale = by[(rank, "ReadRange")], by[(rank, "MapBatches(Scale)")]
        filt = next(r for (k, op), r in by.items() if k == rank and op.startswith("Filter("))
        assert read["rows_out"] == ROWS and read["done"] == 1
        assert (scale["rows_in"], scale["rows_out"]) == (ROWS, ROWS)
        assert (filt["rows_in"], filt["rows_out"]) == (ROWS, kept)
        assert filt["budget_bytes"] == 256 * 1024 * 1024 and filt["rows_per_s"] > 0
        assert filt["blocked_s"] is not None and filt["bytes_in_flight"] == 0  # the pass ended
    assert all(r["execution"] >= 1 for r in reader.data_ops(run_id))


def test_dashboard_api_and_page_show_the_data_panel(data_run, dashboard, page, screenshots):
    _, run_id = _run_id(data_run["storage"])
    d = dashboard(data_run["storage"])
    body = httpx.get(f"{d.base}api/runs/{run_id}/data").json()
    assert {(r["rank"], r["op"]) for r in body["latest"]} >= {(0, "ReadRange"), (1, "MapBatches(Scale)")}
    assert "samples" not in body
    samples = httpx.get(f"{d.base}api/runs/{run_id}/data", params={"after": 0}).json()["samples"]
    assert len(samples) >= len(body["latest"])
    page.goto(f"{d.base}#/run/{run_id}")
    row = page.wait_for_selector("#data-table tr[data-op='MapBatches(Scale)'][data-rank='1']")
    text = row.inner_text()
    assert str(ROWS) in text and "done" in text and "256 MiB" in text
    assert page.query_selector("#chart-data-rate canvas") is not None  # rows/s per operator over time
    page.query_selector("#data-ops").scroll_into_view_if_needed()
    screenshots(page, "dashboard-data")


def test_training_view_prints_a_data_line(capsys):
    from muster.observe.data_progress import OpSample
    from muster.observe.progress import ProgressView

    view = ProgressView("run", 2, 1, "/tmp/run")
    op = OpSample(op="MapBatches(f)", rows_in=10, rows_out=10, blocks=1, busy_s=2.0, bytes_in_flight=2**20,
                  blocked_s=0.5, actors=0, rows_per_s=5.0, budget_bytes=2**28, execution=1)
    view.on_data(1, [op])  # rank 1: every rank runs the same pipeline; rank 0's is shown
    view.on_data(0, [op])
    out = capsys.readouterr().out
    assert out.count("[muster] data rank 0: MapBatches(f): 10 in -> 10 out, 5 rows/s, 1.0/256.0 MiB in flight, "
                     "blocked 0.5 s") == 1

"""The dashboard's ASGI app: a read-only JSON API over the run store, and the static UI.

Every route is a GET that reads the store through a read-only connection;
nothing here writes, deletes or runs anything. Access control (token, Host
check) is the middleware in :mod:`.security`.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from muster.observe import prometheus
from muster.observe.dashboard.security import AccessMiddleware
from muster.observe.recorder import finite
from muster.observe.store.reader import StoreReader

STATIC = pathlib.Path(__file__).parent / "static"


class _Json(JSONResponse):
    """JSON with NaN/inf as null (the store already writes them so; this covers computed figures)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(finite(content), separators=(",", ":")).encode()


def _int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        return default


def create_app(reader: StoreReader, root: str, token: str | None = None, loopback: bool = True) -> Starlette:
    """The dashboard for the store ``reader`` reads (storage root ``root``).

    Args:
        token: when set, every request must carry it (``?token=``, cookie, or
            ``Authorization: Bearer``).
        loopback: the server listens on a loopback address only; requests must
            then name a loopback Host (guards against DNS rebinding).
    """

    def not_found(what: str) -> Response:
        return _Json({"error": f"{what} not found in the run store {reader.path}"}, status_code=404)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def runs(request: Request) -> Response:
        return _Json({"root": root, "runs": reader.runs(request.query_params.get("experiment"))})

    async def run(request: Request) -> Response:
        run_id = int(request.path_params["run_id"])
        info = reader.run(run_id)
        if info is None:
            return not_found(f"run {run_id}")
        return _Json(
            {
                "run": info,
                "workers": reader.workers(run_id),
                "attempts": reader.attempts(run_id),
                "checkpoints": reader.checkpoints(run_id),
                "events": reader.events(run_id),
            }
        )

    async def reports(request: Request) -> Response:
        return _Json({"reports": reader.reports(int(request.path_params["run_id"]), _int(request, "after", 0) or 0)})

    async def samples(request: Request) -> Response:
        return _Json({"samples": reader.samples(int(request.path_params["run_id"]), _int(request, "after", 0) or 0)})

    async def data(request: Request) -> Response:
        run_id = int(request.path_params["run_id"])
        after = _int(request, "after", None)  # with ?after=ID: also every sample past that id (charts, polling)
        return _Json({"latest": reader.data_ops_latest(run_id),
                      **({"samples": reader.data_ops(run_id, after)} if after is not None else {})})

    async def logs(request: Request) -> Response:
        lines = reader.logs(
            int(request.path_params["run_id"]), _int(request, "rank", None), _int(request, "after", 0) or 0,
            min(_int(request, "tail", 500) or 500, 5000),
        )
        return _Json({"logs": lines})

    async def experiments(request: Request) -> Response:
        return _Json({"experiments": reader.experiments()})

    async def experiment(request: Request) -> Response:
        name = request.path_params["name"]
        trials = reader.runs(experiment=name)
        if not trials:
            return not_found(f"experiment {name!r}")
        return _Json({"name": name, "trials": trials, **_experiment_state(root, name)})

    async def serve_list(request: Request) -> Response:
        return _Json({"deployments": reader.serve_deployments()})

    async def serve_deployment(request: Request) -> Response:
        app, dep = request.path_params["app"], request.path_params["deployment"]
        replicas = reader.serve_replicas(app, dep)
        if not replicas:
            return not_found(f"Serve deployment {app}/{dep}")
        return _Json({"app": app, "deployment": dep, "replicas": replicas,
                      "events": [e for e in reader.serve_events(app) if e["deployment"] in (None, dep)],
                      "custom_metrics": reader.serve_custom_metrics(app, dep, running_only=False)})

    async def prometheus_metrics(request: Request) -> Response:
        """The user metrics of running deployments (``serve.metrics``) and of running drivers' tasks and
        actors (``muster.util.metrics``), in Prometheus' text format."""
        series = prometheus.merge([reader.serve_custom_metrics(), reader.user_metrics()])
        return Response(prometheus.render(series), media_type=prometheus.CONTENT_TYPE)

    async def user_metrics(request: Request) -> Response:
        return _Json({"metrics": reader.user_metrics()})

    async def serve_metrics(request: Request) -> Response:
        app, dep = request.path_params["app"], request.path_params["deployment"]
        return _Json({"metrics": reader.serve_metrics(app, dep, _int(request, "replica", None),
                                                      _int(request, "after", 0) or 0)})

    async def serve_logs(request: Request) -> Response:
        pair = (request.path_params["app"], request.path_params["deployment"])
        lines = reader.serve_logs([pair], _int(request, "replica", None), _int(request, "after", 0) or 0,
                                  min(_int(request, "tail", 500) or 500, 5000))
        return _Json({"logs": lines})

    routes = [
        Route("/", index),
        Route("/metrics", prometheus_metrics),
        Route("/api/metrics", user_metrics),
        Route("/api/serve", serve_list),
        Route("/api/serve/{app}/{deployment}", serve_deployment),
        Route("/api/serve/{app}/{deployment}/metrics", serve_metrics),
        Route("/api/serve/{app}/{deployment}/logs", serve_logs),
        Route("/api/runs", runs),
        Route("/api/runs/{run_id:int}", run),
        Route("/api/runs/{run_id:int}/reports", reports),
        Route("/api/runs/{run_id:int}/samples", samples),
        Route("/api/runs/{run_id:int}/logs", logs),
        Route("/api/runs/{run_id:int}/data", data),
        Route("/api/experiments", experiments),
        Route("/api/experiments/{name}", experiment),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(AccessMiddleware, token=token, loopback=loopback)]
    return Starlette(routes=routes, middleware=middleware)


def _experiment_state(root: str, name: str) -> dict[str, Any]:
    """``metric`` and ``mode`` from the Tune experiment's ``experiment_state.json``, when it can be read."""
    import fsspec

    url = f"{root.rstrip('/')}/{name}/experiment_state.json"
    try:
        with fsspec.open(url, "r") as f:
            state = json.load(f)
    except Exception:  # noqa: BLE001 - a missing or half-written file just leaves these out
        return {"metric": None, "mode": None}
    return {"metric": state.get("metric"), "mode": state.get("mode")}

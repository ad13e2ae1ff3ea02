"""Ray's ``LoggingConfig`` in replicas: ``encoding="JSON"`` writes one JSON object per line with Ray's keys (in the
replica's output and its file in ``logs_dir``), access lines go to that file only, and the options are checked."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re

import pytest
from _shared import output_with
from serve_helpers import wait_until

from muster import serve
from muster.serve.schema import LoggingConfig

pytestmark = pytest.mark.allow_leftover_workers  # the module's Serve instance outlives each test


@serve.deployment(ray_actor_options={"num_cpus": 0})
class JsonLogs:
    def __call__(self, request):
        word = request.query_params["w"]
        logging.getLogger("ray.serve").info("hello %s", word, extra={"user_field": 7})
        if word == "boom":
            try:
                raise KeyError("boom")
            except KeyError:
                logging.getLogger("ray.serve").exception("it failed")
        return word


def _records(path: str) -> list[dict]:
    """The file's whole lines: a replica may be appending one as the test polls, and a line that crosses a page
    boundary can be seen cut at it (json.loads of its first part raised inside wait_until)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n") and line.strip()]


def test_json_lines_with_rays_keys_in_the_output_and_the_file(client, tmp_path, capfd):
    logs = str(tmp_path / "logs")
    cfg = LoggingConfig(encoding="JSON", logs_dir=logs, additional_log_standard_attrs=["funcName", "funcName"])
    assert cfg.additional_log_standard_attrs == ["funcName"]
    serve.run(JsonLogs.options(logging_config=cfg).bind(), name="jsonlogs", route_prefix="/json")
    quiet = str(tmp_path / "quiet")
    serve.run(JsonLogs.options(name="NoAccess", logging_config={"logs_dir": quiet, "enable_access_log": False})
              .bind(), name="noaccess", route_prefix="/noaccess")
    for w in ("fig", "boom"):
        r = client.get("/json", params={"w": w}, headers={"X-Request-ID": f"req-{w}"})
        assert r.status_code == 200 and r.text == w
    assert client.get("/noaccess", params={"w": "lime"}).text == "lime"

    (name,) = os.listdir(logs)
    assert re.fullmatch(r"replica_jsonlogs_JsonLogs_\w+\.log", name)  # Ray's file name
    path = os.path.join(logs, name)
    wait_until(lambda: sum("GET /json" in r["message"] for r in _records(path)) == 2, 15, "two access lines")
    recs = _records(path)
    hello = next(r for r in recs if r["message"] == "hello fig")
    assert hello["levelname"] == "INFO" and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}$", hello["asctime"])
    # Ray's values: the deployment as "<app>_<deployment>", the replica by its unique id (the file name's)
    assert hello["deployment"] == "jsonlogs_JsonLogs" and hello["application"] == "jsonlogs"
    assert name == f"replica_jsonlogs_JsonLogs_{hello['replica']}.log" and hello["component_name"] == "replica"
    assert (hello["request_id"], hello["route"]) == ("req-fig", "/json")
    assert (hello["funcName"], hello["user_field"], hello["filename"]) == ("__call__", 7, "test_serve_logging.py")
    assert hello["process"] != os.getpid() and isinstance(hello["timestamp_ns"], int)
    failed = next(r for r in recs if r["message"] == "it failed")
    assert failed["levelname"] == "ERROR" and "KeyError: 'boom'" in failed["exc_text"]
    access = [r for r in recs if r["message"].startswith("GET ")]
    assert [a["request_id"] for a in access] == ["req-fig", "req-boom"]
    assert all(re.fullmatch(r"GET /json 200 \d+\.\dms", a["message"]) for a in access)

    printed = "".join(output_with(capfd, "hello lime", "it failed"))  # the replicas' lines in the driver's output
    mine = [ln for ln in printed.splitlines() if "jsonlogs/JsonLogs" in ln and '"message"' in ln]
    objs = [json.loads(ln[ln.index("{"):]) for ln in mine]  # after the replica's label
    assert {o["message"] for o in objs} == {"hello fig", "hello boom", "it failed"}  # access lines: the file only
    (quiet_name,) = os.listdir(quiet)
    with open(os.path.join(quiet, quiet_name)) as f:
        text = f.read()
    assert "hello lime" in text and "GET /noaccess" not in text and not text.startswith("{")  # TEXT, no access
    unique = quiet_name[len("replica_noaccess_NoAccess_"):-len(".log")]
    assert f" noaccess_NoAccess {unique} " in text.splitlines()[0], text  # Ray's text line names them so too
    serve.delete("jsonlogs")
    serve.delete("noaccess")


from_file = JsonLogs.options(name="FromFile").bind()  # sets no logging_config: the config file's applies


def test_a_config_files_application_logging_config_reaches_its_replicas(client, tmp_path):
    from muster.serve.schema import deploy, load_config

    logs = tmp_path / "file_logs"
    path = tmp_path / "serve.yaml"
    path.write_text(f"""applications:
  - name: fromfile
    route_prefix: /fromfile
    import_path: {__name__}:from_file
    logging_config: {{encoding: JSON, logs_dir: {str(logs)!r}}}
""")
    config = load_config(str(path))
    assert config.applications[0].logging_config == LoggingConfig(encoding="JSON", logs_dir=str(logs))
    deploy(config)
    assert client.get("/fromfile", params={"w": "plum"}).text == "plum"
    (name,) = os.listdir(logs)
    assert re.fullmatch(r"replica_fromfile_FromFile_\w+\.log", name)
    file = os.path.join(logs, name)
    wait_until(lambda: any(r["message"] == "hello plum" for r in _records(file)), 15, "the JSON line")
    hello = next(r for r in _records(file) if r["message"] == "hello plum")
    assert hello["application"] == "fromfile" and hello["deployment"] == "fromfile_FromFile"
    serve.delete("fromfile")


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Inner:
    def log(self, word):
        logging.getLogger("ray.serve").info("inner %s", word)
        ctx = serve.context._get_serve_request_context()
        return ctx.request_id, ctx.route, ctx.app_name


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Outer:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, request):
        return list(await self.inner.log.remote(request.query_params["w"]))

    def relay(self, word):  # a sync method (the executor), calling on through the handle it was given
        logging.getLogger("ray.serve").info("outer %s", word)
        return self.inner.log.remote(word).result()


def test_handle_calls_carry_a_request_id_and_nested_calls_keep_their_parents(client, tmp_path):
    logs = str(tmp_path / "nested")
    cfg = LoggingConfig(encoding="JSON", logs_dir=logs)
    handle = serve.run(Outer.options(logging_config=cfg).bind(Inner.options(logging_config=cfg).bind()),
                       name="nested", route_prefix="/nested")
    inner = serve.get_deployment_handle("Inner", "nested")
    first, second = inner.log.remote("drv"), inner.log.remote("drv2")
    rid, route, app = first.result(timeout_s=30)
    assert rid == first.request_id and route == "" and app == "nested"  # a new id per call from the driver
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", rid)
    assert second.result(timeout_s=30)[0] == second.request_id != rid
    relayed = handle.relay.remote("via")
    assert relayed.result(timeout_s=30) == (relayed.request_id, "", "nested")  # the parent's id, one hop on
    r = client.get("/nested", params={"w": "web"}, headers={"X-Request-ID": "req-web"})
    assert r.json() == ["req-web", "/nested", "nested"]  # an HTTP request's id and route, carried on

    def lines() -> dict[str, dict]:
        return {r["message"]: r for name in os.listdir(logs) for r in _records(os.path.join(logs, name))}

    wait_until(lambda: {"inner drv", "inner via", "outer via", "inner web"} <= set(lines()), 15, "the JSON lines")
    got = lines()
    assert got["inner drv"]["request_id"] == rid and "route" not in got["inner drv"]
    assert got["outer via"]["request_id"] == got["inner via"]["request_id"] == relayed.request_id
    assert (got["inner web"]["request_id"], got["inner web"]["route"]) == ("req-web", "/nested")
    def calls() -> list[dict]:
        return [r for name in os.listdir(logs) for r in _records(os.path.join(logs, name))
                if r["message"].startswith("CALL log")]

    wait_until(lambda: len(calls()) == 4, 15, "the inner calls' access lines")
    assert {c["request_id"] for c in calls()} == {rid, second.request_id, relayed.request_id, "req-web"}
    assert serve.context._get_serve_request_context().request_id == ""  # the driver serves no request
    serve.delete("nested")


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=8)
class Batched:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=10)  # four callers fill it at once: the wait is a bound
    async def words(self, words):
        callers = serve.context._get_serve_batch_request_context()
        logging.getLogger("ray.serve").info("batch of %d", len(words))
        inside = serve.context._get_serve_request_context().request_id
        return [{"words": words, "ids": [c.request_id for c in callers], "routes": [c.route for c in callers],
                 "inside": inside}] * len(words)

    async def __call__(self, request):
        word = request.query_params["w"]
        got = await self.words(word)
        logging.getLogger("ray.serve").info("done %s", word)
        return got


def test_a_batch_lists_its_callers_request_contexts_and_each_caller_keeps_its_own(client, tmp_path):
    logs = str(tmp_path / "batched")
    serve.run(Batched.options(logging_config=LoggingConfig(encoding="JSON", logs_dir=logs)).bind(),
              name="batched", route_prefix="/batched")
    words = ["a", "b", "c", "d"]
    with concurrent.futures.ThreadPoolExecutor(len(words)) as pool:
        got = list(pool.map(lambda w: client.get("/batched", params={"w": w}, headers={"X-Request-ID": f"req-{w}"}),
                            words))
    for w, r in zip(words, got):
        body = r.json()
        assert sorted(body["words"]) == words and body["routes"] == ["/batched"] * 4  # one batch of all four
        assert body["ids"] == [f"req-{x}" for x in body["words"]]  # each caller's context, in the batch's order
        assert body["ids"][body["words"].index(w)] == f"req-{w}" and body["inside"] == ""  # none is "the" request
    assert serve.context._get_serve_batch_request_context() == []  # outside a batch

    def lines() -> list[dict]:
        return [r for name in os.listdir(logs) for r in _records(os.path.join(logs, name))]

    wait_until(lambda: sum(r["message"].startswith("GET /batched") for r in lines()) == 4, 15, "the access lines")
    recs = lines()
    assert {r["message"]: r["request_id"] for r in recs if r["message"].startswith("done ")} == {
        f"done {w}": f"req-{w}" for w in words}
    assert sorted(r["request_id"] for r in recs if r["message"].startswith("GET /batched")) == [
        f"req-{w}" for w in words]
    (batch_line,) = [r for r in recs if r["message"] == "batch of 4"]
    assert "request_id" not in batch_line and "route" not in batch_line  # as in Ray: the batch serves no one request
    serve.delete("batched")


@serve.deployment(ray_actor_options={"num_cpus": 0})
class NoHttp:
    def fails(self):
        raise KeyError("user-bug")


def test_a_call_to_a_missing_method_logs_one_line_and_user_errors_their_traceback(client, capfd):
    """The caller's error already lists the methods: the replica says it in one line, where it logged a traceback of
    its own frames; an exception in user code still logs its traceback."""
    h = serve.run(NoHttp.bind(), name="nohttp", route_prefix="/nohttp")
    with pytest.raises(serve.RayServeException, match="no method 'nope'"):
        h.nope.remote().result(timeout_s=30)
    assert client.get("/nohttp").status_code == 500  # no __call__
    with pytest.raises(KeyError, match="user-bug"):
        h.fails.remote().result(timeout_s=30)
    text = "".join(output_with(capfd, "user-bug", "'__call__'", "'nope'"))  # the replica's three error lines
    nope = [ln for ln in text.splitlines() if "no method 'nope'" in ln]
    assert len(nope) == 1 and "nope() failed: RayServeException: " in nope[0], text
    http = [ln for ln in text.splitlines() if "no method '__call__'" in ln]
    assert len(http) == 1 and "GET /nohttp failed: RayServeException: " in http[0], text
    assert text.count("Traceback (most recent call last)") == 1, text  # the user's KeyError only
    assert re.search(r"Traceback \(most recent call last\):\n(.*\n)*.*in fails\n(.*\n)*.*KeyError: 'user-bug'", text)
    serve.delete("nohttp")


def test_logging_config_is_checked():
    with pytest.raises(ValueError, match=r"additional_log_standard_attrs=\['funcname'\].*LogRecord"):
        LoggingConfig(additional_log_standard_attrs=["funcname"])
    with pytest.raises(ValueError, match=r"encoding='XML'"):
        LoggingConfig(encoding="XML")
    from muster.serve.schema import ServeConfig

    with pytest.raises(ValueError, match=r"encoding='XML'"):
        ServeConfig.from_dict({"applications": [{"import_path": "m:app", "logging_config": {"encoding": "XML"}}]})

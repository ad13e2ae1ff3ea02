"""The OpenAI app without Serve (openai_asgi_app under uvicorn), with the engines in this process so tests
can inject faults into them: engine errors (500), a full queue (503), and client disconnects."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import httpx
import openai
import pytest
from _uvicorn_app import served

from muster.serve.llm import LLMConfig, LLMServer, openai_asgi_app

pytestmark = pytest.mark.timeout(300)

CHAT = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def servers(tiny_model):
    """One model with room for 2 running + 1 waiting request, so overload is easy to reach."""
    server = LLMServer(LLMConfig(
        model_loading_config=dict(model_id="small", model_source=str(tiny_model)), llm_engine="transformers",
        engine_kwargs=dict(max_model_len=512, max_num_seqs=2, max_waiting_requests=1),
    ))
    yield {"small": server}
    server.shutdown()


@pytest.fixture(scope="module")
def base_url(servers):
    with served(openai_asgi_app(list(servers.values()))) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=60)


def test_engine_fault_is_a_500_and_the_engine_recovers(client, servers):
    engine = servers["small"].engine

    def explode(module, args, kwargs):
        raise RuntimeError("injected fault in the forward pass")

    hook = engine.model.register_forward_pre_hook(explode, with_kwargs=True)
    try:
        with pytest.raises(openai.InternalServerError) as err:
            client.chat.completions.create(model="small", messages=CHAT, max_tokens=4)
    finally:
        hook.remove()
    assert err.value.status_code == 500
    assert "injected fault" in err.value.body["message"] and err.value.body["type"] == "internal_server_error"
    ok = client.chat.completions.create(model="small", messages=CHAT, max_tokens=4, temperature=0)
    assert ok.usage.completion_tokens == 4


def test_overload_is_a_503_with_openai_error_shape(base_url, client, servers):
    """3 long streams fill the 2 batch slots and the 1 waiting place; a 4th request is refused at once."""
    engine = servers["small"].engine
    body = {"model": "small", "messages": CHAT, "max_tokens": 400, "temperature": 0, "stream": True}
    release = threading.Event()

    def hold_a_stream() -> int:
        with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as r:
            release.wait(60)
            return r.status_code

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        held = [pool.submit(hold_a_stream) for _ in range(3)]
        try:
            deadline = time.monotonic() + 30
            while engine.stats().running + engine.stats().waiting < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert engine.stats().running + engine.stats().waiting == 3
            with pytest.raises(openai.APIStatusError) as err:
                client.chat.completions.create(model="small", messages=CHAT, max_tokens=4)
        finally:
            release.set()
        assert [f.result(60) for f in held[:2]] == [200, 200]
    assert err.value.status_code == 503 and err.value.body["code"] == "overloaded"
    assert "max_waiting_requests" in err.value.body["message"]


def test_client_disconnect_stops_generation(base_url, servers):
    engine = servers["small"].engine
    deadline = time.monotonic() + 30
    while engine.stats().running and time.monotonic() < deadline:  # earlier tests' aborts settle
        time.sleep(0.05)
    before = engine.stats()
    body = {"model": "small", "messages": CHAT, "max_tokens": 400, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(4):
            next(lines)
    while time.monotonic() < deadline and (engine.stats().running or engine.stats().waiting):
        time.sleep(0.05)
    time.sleep(0.3)
    after = engine.stats()
    assert after.running == 0 and after.requests_finished == before.requests_finished + 1
    generated = after.generated_tokens - before.generated_tokens
    assert generated < 300, f"{generated} of 400 tokens were generated although the client left early"


def test_three_requests_fit_two_slots_and_one_waiting_place(client):
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(
            lambda _: client.chat.completions.create(model="small", messages=CHAT, max_tokens=6, temperature=0),
            range(3)))
    assert len({r.choices[0].message.content for r in results}) == 1


def test_a_wrong_method_gets_the_openai_error_shape(base_url):
    """Starlette answered a PUT with a plain-text 405; Serve's ingress answers it with OpenAI's error object."""
    for method in ("PUT", "DELETE"):
        r = httpx.request(method, f"{base_url}/chat/completions", json={}, timeout=30)
        error = r.json()["error"]
        assert r.status_code == 404 and error["code"] == "not_found", r.text
        assert f"no route {method} /v1/chat/completions" in error["message"] and "POST /v1/" in error["message"]

"""The seed's app (build_openai_app on muster.serve) driven with the official openai client over real HTTP."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re
import struct
import time

import httpx
import openai
import pytest

from muster import serve
from muster.serve.llm import LLMConfig, build_openai_app

pytestmark = [pytest.mark.allow_leftover_workers, pytest.mark.timeout(400)]

CHAT = [{"role": "user", "content": "Explain gradient checkpointing in 2 sentences."}]


@pytest.fixture(scope="module")
def storage(tmp_path_factory, monkeypatch_module):
    """The storage path whose run store records this module's Serve app."""
    path = str(tmp_path_factory.mktemp("llm-store"))
    monkeypatch_module.setenv("MUSTER_STORAGE_PATH", path)
    return path


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def base_url(tiny_model, tiny_gpt2_no_template, storage):
    """Two models in one app: a chat model and one whose tokenizer has no chat template."""
    chat = LLMConfig(
        model_loading_config=dict(model_id="tiny-chat", model_source=str(tiny_model)), llm_engine="transformers",
        deployment_config=dict(ray_actor_options={"num_cpus": 1}),
        engine_kwargs=dict(max_model_len=256, max_num_seqs=32),
    )
    plain = LLMConfig(
        model_loading_config=dict(model_id="tiny-plain", model_source=str(tiny_gpt2_no_template)),
        llm_engine="transformers", deployment_config=dict(ray_actor_options={"num_cpus": 0.5}),
        engine_kwargs=dict(max_model_len=128),
    )
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        serve.run(build_openai_app({"llm_configs": [chat, plain]}), name="llm")
        yield f"http://127.0.0.1:{serve.status().http['port']}/v1"
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=120)


def engine_stats(model: str = "tiny-chat") -> dict:
    return serve.get_deployment_handle(f"LLMServer:{model}", "llm").stats.remote().result(timeout_s=30)


def greedy_chat(client, **kw):
    kw.setdefault("max_tokens", 12)
    return client.chat.completions.create(model="tiny-chat", messages=CHAT, temperature=0, **kw)


def test_models_are_listed_and_retrievable(client):
    assert sorted(m.id for m in client.models.list().data) == ["tiny-chat", "tiny-plain"]
    card = client.models.retrieve("tiny-plain")
    assert card.id == "tiny-plain" and card.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-5")


def test_chat_plain_and_streamed_give_the_same_greedy_text(client):
    plain = greedy_chat(client)
    assert plain.object == "chat.completion" and plain.model == "tiny-chat"
    choice = plain.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert plain.usage.completion_tokens == 12
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + 12
    assert greedy_chat(client).choices[0].message.content == choice.message.content  # deterministic

    chunks = list(greedy_chat(client, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == plain.usage.model_dump()
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.object == "chat.completion.chunk" for c in chunks)


def test_sse_wire_format_ends_with_done(base_url):
    body = {"model": "tiny-chat", "messages": CHAT, "max_completion_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"
    # as OpenAI's: every chunk's choice has finish_reason and logprobs (null until the end), the delta
    # has the role in the first chunk only, and no usage unless stream_options asked for it
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all({"finish_reason", "logprobs"} <= set(c["choices"][0]) and "usage" not in c for c in chunks), chunks
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and chunks[0]["choices"][0]["finish_reason"] is None
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])


def test_chat_options_n_stop_and_max_completion_tokens(client):
    full = greedy_chat(client, max_tokens=20).choices[0].message.content
    two = greedy_chat(client, max_tokens=None, max_completion_tokens=20, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert all(c.message.content == full for c in two.choices)
    assert two.usage.completion_tokens == 40
    texts = {0: "", 1: ""}
    for chunk in greedy_chat(client, max_tokens=20, n=2, stream=True):
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == {0: full, 1: full}
    stop = full[5:8]
    cut = greedy_chat(client, max_tokens=20, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.message.content == full[: full.index(stop)]
    sampled = client.chat.completions.create(model="tiny-chat", messages=CHAT, max_tokens=8, temperature=1.0,
                                             top_p=0.9, seed=7)
    assert sampled.usage.completion_tokens <= 8


def test_completions_take_a_string_or_a_list(client):
    one = client.completions.create(model="tiny-plain", prompt="The quick brown fox", max_tokens=6, temperature=0)
    assert one.object == "text_completion" and one.choices[0].finish_reason == "length"
    assert one.usage.completion_tokens == 6
    many = client.completions.create(model="tiny-plain", prompt=["The quick brown fox", "hello"], max_tokens=6,
                                     temperature=0)
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[0].text == one.choices[0].text
    streamed = client.completions.create(model="tiny-plain", prompt="The quick brown fox", max_tokens=6,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == one.choices[0].text


def test_embeddings_float_and_base64(client):
    out = client.embeddings.create(model="tiny-chat", input=["hello world", "lazy dog"])
    assert [d.index for d in out.data] == [0, 1] and len(out.data[0].embedding) == 64
    assert out.usage.prompt_tokens > 0
    raw = client.embeddings.create(model="tiny-chat", input="hello world", encoding_format="base64")
    vec = raw.data[0].embedding
    if isinstance(vec, str):  # the client leaves base64 as sent when asked for it explicitly
        vec = list(struct.unpack(f"<{len(base64.b64decode(vec)) // 4}f", base64.b64decode(vec)))
    assert vec == pytest.approx(out.data[0].embedding, abs=1e-5)


def test_sixteen_concurrent_requests_batch_together(client):
    """16 clients at once: every answer equals the same request alone, and the engine decoded them in
    shared steps (far fewer than 16 x 16)."""
    expected = greedy_chat(client, max_tokens=16).choices[0].message.content
    before = engine_stats()["steps"]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: greedy_chat(client, max_tokens=16), range(16)))
    stats = engine_stats()
    steps = stats["steps"] - before
    assert [r.choices[0].message.content for r in results] == [expected] * 16
    assert stats["tokens_per_s"] > 0 and stats["ttft_p50_s"] > 0 and stats["waiting"] == 0
    assert steps < 16 * 16 / 2, f"16 concurrent requests took {steps} decoding steps: they were not batched"


@pytest.mark.parametrize("kw, status, words", [
    (dict(messages=[]), 400, "messages is empty"),
    (dict(messages=CHAT, temperature=5), 400, "temperature"),
    (dict(messages=CHAT, n=0), 400, "n"),
    (dict(messages=CHAT, frequency_penalty=2.5), 400, "frequency_penalty: Input should be less than or equal to 2"),
    (dict(messages=CHAT, logit_bias={"abc": 5}), 400, "logit_bias key 'abc' is not a token id"),
    (dict(messages=CHAT, logit_bias={"7": 101}), 400, "logit_bias['7']=101.0 is out of range"),
    (dict(messages=CHAT, logit_bias={"99999999": 1}), 400, "logit_bias names token ids [99999999], outside"),
    (dict(messages=CHAT, extra_body={"repetition_penalty": 0}), 400, "repetition_penalty=0 is not valid"),
    # structured output, tools and images would be silently ignored otherwise: refused, by name
    (dict(messages=CHAT, response_format={"type": "xml"}), 400, "response_format type 'xml' is not supported"),
    (dict(messages=CHAT, response_format={"type": "json_schema", "json_schema": {"name": "a"}}), 400,
     "response_format.json_schema.schema is None"),
    (dict(messages=CHAT, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "objekt"}}}), 400, "response_format cannot be used: "),
    (dict(messages=CHAT, response_format={"type": "json_object"}, extra_body={"guided_regex": "a+"}), 400,
     "response_format and guided_regex both constrain the output"),
    (dict(messages=CHAT, extra_body={"guided_choice": "yes"}), 400, "guided_choice='yes' is not valid"),
    (dict(messages=CHAT, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), 400,
     "tool_choice='auto' (the default with tools)"),
    (dict(messages=CHAT, tools=[{"type": "function", "function": {"name": "f"}}],
          tool_choice={"type": "function", "function": {"name": "g"}}), 400, "names the function 'g', which is not"),
    (dict(messages=CHAT, tools=[{"type": "function"}], tool_choice="required"), 400, "tools[0] is"),
    (dict(messages=CHAT, tool_choice="required"), 400, "tool_choice='required' needs tools"),
    (dict(messages=CHAT, tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="required",
          response_format={"type": "json_object"}), 400, "both constrain the output"),
    (dict(messages=CHAT, functions=[{"name": "f"}]), 400, "functions (OpenAI's deprecated function calling)"),
    (dict(messages=CHAT, extra_body={"guided_grammar": "root ::= 'a'"}), 400, "guided_grammar (vLLM's"),
    (dict(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                 {"type": "image_url", "image_url": {"url": "data:,"}}]}]),
     400, "content parts of type 'image_url' are not supported"),
    (dict(messages=[{"role": "user", "content": "long " * 300}], max_tokens=4), 400, "maximum context length"),
    (dict(messages=CHAT, max_tokens=500), 400, "maximum context length"),
    (dict(messages=CHAT, model="no-such-model"), 404, "does not exist"),
    (dict(messages=CHAT, model="tiny-plain"), 400, "no chat template"),
    # each was answered 200 before: OpenAI refuses them
    (dict(messages=CHAT, top_logprobs=2), 400, "The 'top_logprobs' parameter is only allowed when 'logprobs' is "
     "enabled (got top_logprobs=2 with logprobs=None)"),
    (dict(messages=CHAT, logprobs=False, top_logprobs=2), 400, "got top_logprobs=2 with logprobs=False"),
    (dict(messages=CHAT, logprobs=True, top_logprobs=21), 400, "top_logprobs: Input should be less than or equal "
     "to 20 (got 21)"),
    (dict(messages=CHAT, extra_body={"top_k": -2}), 400, "top_k=-2 is not valid"),
    (dict(messages=CHAT, extra_body={"top_k": 1.5}), 400, "top_k=1.5 is not valid"),
    (dict(messages=CHAT, stream_options={"include_usage": True}), 400, "stream_options is only allowed when stream"),
    (dict(messages=CHAT, max_tokens=True), 400, "max_tokens: Input should be a valid integer"),
    (dict(messages=CHAT, temperature="0.5"), 400, "temperature: Input should be a valid number"),
])
def test_errors_have_openai_shape_and_status(client, kw, status, words):
    kw.setdefault("model", "tiny-chat")
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**kw)
    assert err.value.status_code == status
    body = err.value.body
    assert set(body) >= {"message", "type", "param", "code"}, body  # the client unwraps {"error": {...}}
    assert words in body["message"]


def test_vllm_sampling_extras_are_taken_or_refused_by_name_unless_off(client, tiny_model):
    """Ray's docs pass vLLM's sampling parameters through extra_body; they were silently ignored here, then
    refused; min_p, min_tokens, ignore_eos, allowed_token_ids and stop_token_ids are now taken (checked, with
    the bad values named); the others are refused by name unless they hold their "off" value."""
    for kw, param in ((dict(length_penalty=1.3), "length_penalty"), (dict(use_beam_search=True), "use_beam_search"),
                      (dict(bad_words=["x"]), "bad_words")):
        with pytest.raises(openai.BadRequestError) as err:
            greedy_chat(client, max_tokens=2, extra_body=kw)
        assert err.value.body["param"] == param and f"{param}={kw[param]!r}" in err.value.body["message"]
    for kw, words in ((dict(min_p=2), "min_p=2 is not valid: send a number in 0..1"),
                      (dict(min_tokens=-1), "min_tokens=-1 is not valid"),
                      (dict(min_tokens=5), "min_tokens=5 is above max_tokens=2"),
                      (dict(allowed_token_ids=[]), "allowed_token_ids=[] is not valid"),
                      (dict(stop_token_ids=[10 ** 9]), "stop_token_ids names token ids [1000000000], outside")):
        with pytest.raises(openai.BadRequestError, match=re.escape(words)):
            greedy_chat(client, max_tokens=2, extra_body=kw)
    off = dict(top_k=-1, min_p=0.0, repetition_penalty=1.0, ignore_eos=False, skip_special_tokens=True)
    assert greedy_chat(client, max_tokens=2, extra_body=off).usage.completion_tokens == 2
    from transformers import AutoTokenizer

    a, b = AutoTokenizer.from_pretrained(tiny_model).convert_ids_to_tokens([72, 73])  # one character each
    taken = dict(min_p=0.1, min_tokens=3, ignore_eos=True, allowed_token_ids=[72, 73], stop_token_ids=[73])
    r = client.completions.create(model="tiny-chat", prompt="hi", max_tokens=8, temperature=1, extra_body=taken)
    text = r.choices[0].text  # only a and b, no b (the stop token) in the first 3, then up to the first b
    assert set(text) <= {a, b} and b not in text[:3] and (text.endswith(b) or len(text) == 8), text
    assert r.choices[0].finish_reason == ("stop" if text.endswith(b) else "length")


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {
    "type": "object", "required": ["city", "unit"], "additionalProperties": False,
    "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "required": ["zone"], "additionalProperties": False,
    "properties": {"zone": {"enum": ["UTC", "CET"]}}}}}


def _checked_call(call, tools=(WEATHER, TIME)):
    """The call's name and arguments, checked against the schema of the tool it names."""
    spec = next(t["function"] for t in tools if t["function"]["name"] == call.function.name)
    args = json.loads(call.function.arguments)
    assert call.type == "function" and call.id.startswith("call_") and set(args) == set(spec["parameters"]["required"])
    for key, value in args.items():
        schema = spec["parameters"]["properties"][key]
        assert value in schema["enum"] if "enum" in schema else isinstance(value, str) and len(value) <= 10
    return call.function.name, args


def test_tool_calls_named_and_required_plain_and_streamed(client):
    """tools with tool_choice naming a function or "required" (refused with 400 before): the random tiny
    model answers with calls whose arguments follow each tool's schema, in OpenAI's shape as the official client
    parses it; the tools reach the chat template (the prompt grows); earlier calls and tool answers render."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = greedy_chat(client, max_tokens=60, tools=[WEATHER, TIME], tool_choice=named)
    (call,) = r.choices[0].message.tool_calls
    assert _checked_call(call)[0] == "get_weather" and r.choices[0].message.content is None
    assert r.choices[0].finish_reason == "stop"  # OpenAI's, for a named call
    assert r.usage.prompt_tokens > greedy_chat(client, max_tokens=1).usage.prompt_tokens  # the tools' names added
    one = greedy_chat(client, max_tokens=80, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False)
    assert len(one.choices[0].message.tool_calls) == 1 and one.choices[0].finish_reason == "tool_calls"
    _checked_call(one.choices[0].message.tool_calls[0])
    stream = client.chat.completions.create(model="tiny-chat", messages=CHAT, temperature=0, max_tokens=80,
                                            tools=[WEATHER, TIME], tool_choice="required", stream=True,
                                            parallel_tool_calls=False)  # (the random model would add calls)
    chunks = [c.choices[0] for c in stream if c.choices]
    deltas = [d for c in chunks for d in (c.delta.tool_calls or [])]
    assert chunks[-1].finish_reason == "tool_calls" and deltas and [d.index for d in deltas] == list(range(len(deltas)))
    for d in deltas:
        _checked_call(d)
    turns = CHAT + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}]
    again = client.chat.completions.create(model="tiny-chat", messages=turns, temperature=0, max_tokens=4,
                                           tools=[WEATHER], tool_choice="none")  # "none": text, tools left out
    without_call = [*turns[:-2], {"role": "assistant", "content": None}, turns[-1]]
    assert again.choices[0].message.content and again.usage.prompt_tokens > client.chat.completions.create(
        model="tiny-chat", messages=without_call, temperature=0, max_tokens=1).usage.prompt_tokens  # the call rendered
    with pytest.raises(openai.BadRequestError, match="tools are for /v1/chat/completions"):
        client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2, extra_body={"tools": [WEATHER]})


def test_chat_logprobs_plain_and_streamed(client):
    """logprobs=True, top_logprobs=3 in OpenAI's shape, parsed by the client into its typed objects."""
    r = greedy_chat(client, max_tokens=8, logprobs=True, top_logprobs=3)
    choice = r.choices[0]
    content = choice.logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    assert "".join(t.token for t in content) == choice.message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3 and bytes(t.bytes) == t.token.encode()
        # greedy: the chosen token is the most likely one, and the alternatives come most likely first
        assert t.logprob == t.top_logprobs[0].logprob == max(x.logprob for x in t.top_logprobs)
        assert [x.logprob for x in t.top_logprobs] == sorted((x.logprob for x in t.top_logprobs), reverse=True)
    streamed = [t for chunk in greedy_chat(client, max_tokens=8, logprobs=True, top_logprobs=3, stream=True)
                for c in chunk.choices if c.logprobs for t in c.logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content], abs=1e-4)
    bare = greedy_chat(client, max_tokens=4, logprobs=True).choices[0].logprobs.content
    assert len(bare) == 4 and all(t.top_logprobs == [] for t in bare)  # logprobs alone: no alternatives
    assert greedy_chat(client, max_tokens=2).choices[0].logprobs is None  # not asked: null, as before


def test_completion_logprobs_in_the_legacy_shape(client):
    kw = dict(model="tiny-chat", prompt="The quick brown fox", max_tokens=6, temperature=0, logprobs=2)
    r = client.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.tokens) == 6
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        # the sampled token is always in the dict (up to k + 1 entries; tokens of the same text share one)
        assert logprob <= 0 and top[token] == logprob == max(top.values()) and len(top) <= 3
    chunks = [c.choices[0].logprobs for c in client.completions.create(**kw, stream=True) if c.choices]
    assert [t for c in chunks for t in c.tokens] == lp.tokens
    assert [o for c in chunks for o in c.text_offset] == lp.text_offset


def test_top_k_one_samples_the_greedy_text(client):
    """vLLM's top_k (extra_body): at temperature 1.0, top_k=1 leaves only the most likely token."""
    greedy = greedy_chat(client, max_tokens=16).choices[0].message.content
    for _ in range(2):
        sampled = client.chat.completions.create(model="tiny-chat", messages=CHAT, max_tokens=16, temperature=1.0,
                                                 extra_body={"top_k": 1})
        assert sampled.choices[0].message.content == greedy
    wide = {client.chat.completions.create(model="tiny-chat", messages=CHAT, max_tokens=16, temperature=1.0,
                                           extra_body={"top_k": k}).choices[0].message.content for k in (-1, 0, 50)}
    assert wide != {greedy}  # off (-1, 0) or wide: sampled text of a random model differs from greedy
    text = client.completions.create(model="tiny-chat", prompt="hello", max_tokens=8, temperature=0).choices[0].text
    assert client.completions.create(model="tiny-chat", prompt="hello", max_tokens=8, temperature=1.0,
                                     extra_body={"top_k": 1}).choices[0].text == text


def test_embedding_errors_name_input(base_url):
    """The embeddings route names its own field, `input` (it said `prompt`)."""
    for value, words in (([], "input is an empty list"), ([10**6], "outside the vocabulary")):
        r = httpx.post(f"{base_url}/embeddings", json={"model": "tiny-chat", "input": value}, timeout=60)
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "input" and words in error["message"], r.text


def test_malformed_json_is_a_400(base_url):
    r = httpx.post(f"{base_url}/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    # a body that is no JSON object was answered "`model` must name one of [...], got None"
    for body, words in ((b"", "got nothing (the body is empty)"), (b"[1, 2]", "got a JSON list ([1, 2])")):
        r = httpx.post(f"{base_url}/chat/completions", content=body, timeout=30)
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


def test_openai_details_params_nulls_and_stream_usage(base_url):
    """Found with the official client and curl: the wrong param for a long completion prompt, n: null refused,
    a stop error that repeated its value, and chunks without "usage": null under include_usage."""
    def post(route, **body):
        return httpx.post(f"{base_url}/{route}", json={"model": "tiny-chat", **body}, timeout=60)

    long = "long " * 300
    r = post("completions", prompt=long, max_tokens=2)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text  # it said "messages"
    r = post("chat/completions", messages=[{"role": "user", "content": long}], max_tokens=2)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    nulls = dict(n=None, stream=None, stream_options=None, temperature=None, stop=None, seed=None)
    r = post("chat/completions", messages=CHAT, max_tokens=2, **nulls)  # OpenAI's "... or null" fields
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    r = post("completions", prompt="hi", max_tokens=2, echo=None, suffix=None, logprobs=None, **nulls)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    message = post("chat/completions", messages=CHAT, stop=list("abcde")).json()["error"]["message"]
    assert message.count("['a', 'b', 'c', 'd', 'e']") == 1, message
    for route, prompt in (("chat/completions", {"messages": CHAT}), ("completions", {"prompt": "hi"})):
        body = {"model": "tiny-chat", **prompt, "max_tokens": 2, "stream": True,
                "stream_options": {"include_usage": True}}
        with httpx.stream("POST", f"{base_url}/{route}", json=body, timeout=60) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert all("usage" in c and c["usage"] is None for c in chunks[:-1]), chunks  # null until the end
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2


def test_client_disconnect_stops_generation(base_url):
    before = engine_stats()
    body = {"model": "tiny-chat", "messages": CHAT, "max_tokens": 200, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
    assert all(line.startswith("data: ") or not line for line in got)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = engine_stats()
        if now["requests_finished"] > before["requests_finished"] and now["running"] == 0:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    after = engine_stats()
    assert after["running"] == 0 and after["requests_finished"] == before["requests_finished"] + 1
    generated = after["generated_tokens"] - before["generated_tokens"]
    assert generated < 150, f"the request generated {generated} of 200 tokens after its client left"


def test_tensor_parallel_replica_that_can_never_fit_fails_at_deploy(base_url, tiny_model):
    """tensor_parallel_size=2 makes the replica ask for 2 GPUs; this GPU-less engine says so at once."""
    from muster.exceptions import ResourcesUnavailableError

    cfg = LLMConfig(model_loading_config=dict(model_id="tp2", model_source=str(tiny_model)), llm_engine="transformers",
                    accelerator_type="A100", engine_kwargs=dict(tensor_parallel_size=2))
    with pytest.raises(ResourcesUnavailableError, match="GPU"):
        serve.run(build_openai_app({"llm_configs": [cfg]}), name="tp2", route_prefix="/tp2")


def test_an_app_of_one_model_is_its_llm_server_alone(base_url, tmp_path):
    """One model: the LLMServer deployment answers HTTP itself (no OpenAiIngress hop); streaming, listing and
    client disconnect work the same."""
    from muster.serve.llm.tiny_model import build_tiny_model

    # A long context, so that a generation the disconnect does not stop runs for seconds (the tiny model makes
    # ~1000 tokens/s and, greedy, runs to max_tokens): noticing the disconnect late under load cannot be mistaken
    # for not stopping.
    max_tokens = 4000
    model = build_tiny_model(tmp_path / "long", max_positions=4096)
    cfg = LLMConfig(model_loading_config=dict(model_id="solo", model_source=str(model)), llm_engine="transformers",
                    deployment_config=dict(ray_actor_options={"num_cpus": 0.5}),
                    engine_kwargs=dict(max_model_len=4096, max_num_seqs=2))
    serve.run(build_openai_app({"llm_configs": [cfg]}), name="solo", route_prefix="/solo")
    try:
        assert sorted(serve.status().applications["solo"].deployments) == ["LLMServer:solo"]
        url = base_url.replace("/v1", "/solo/v1")
        solo = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0, timeout=120)
        assert [m.id for m in solo.models.list().data] == ["solo"]
        plain = solo.chat.completions.create(model="solo", messages=CHAT, temperature=0, max_tokens=12)
        streamed = solo.chat.completions.create(model="solo", messages=CHAT, temperature=0, max_tokens=12, stream=True)
        streamed_text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert streamed_text == plain.choices[0].message.content
        with pytest.raises(openai.NotFoundError):
            solo.chat.completions.create(model="tiny-chat", messages=CHAT, max_tokens=2)
        handle = serve.get_deployment_handle("LLMServer:solo", "solo")
        before = handle.stats.remote().result(timeout_s=30)
        body = {"model": "solo", "messages": CHAT, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            [next(lines) for _ in range(6)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            after = handle.stats.remote().result(timeout_s=30)
            if after["requests_finished"] > before["requests_finished"] and after["running"] == 0:
                break
            time.sleep(0.1)
        assert after["running"] == 0 and after["generated_tokens"] - before["generated_tokens"] < max_tokens // 2
    finally:
        serve.delete("solo")


def test_token_counts_time_to_first_token_and_queue_depth_reach_the_store_and_dashboard(client, storage):
    """Real traffic on tiny-plain (streamed and not): the run store's counts equal the usage the client got,
    and samples taken under load hold time to first token and a non-empty engine queue."""
    import threading

    from _shared import Dashboard
    from muster.observe.store.reader import StoreReader

    before = engine_stats("tiny-plain")
    usage = {"prompt": 0, "completion": 0, "requests": 0}
    lock = threading.Lock()

    def one(i: int) -> None:
        prompt = ["The quick brown fox", "hello there"][i % 2]
        if i % 2:
            r = client.completions.create(model="tiny-plain", prompt=prompt, max_tokens=48, temperature=0)
            got = r.usage
        else:
            got = [c.usage for c in client.completions.create(
                model="tiny-plain", prompt=prompt, max_tokens=48, temperature=0, stream=True,
                stream_options={"include_usage": True}) if c.usage][-1]
        with lock:
            usage["prompt"] += got.prompt_tokens
            usage["completion"] += got.completion_tokens
            usage["requests"] += 1

    reader = StoreReader.for_root(storage)
    dep = "LLMServer:tiny-plain"
    loaded = lambda: [m for m in reader.serve_metrics("llm", dep)  # noqa: E731
                      if (m["queue_depth"] or 0) > 0 and m["ttft_samples"]]
    deadline = time.monotonic() + 60
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        while not loaded() and time.monotonic() < deadline:  # rounds of 8 at once until a sample saw them queued
            list(pool.map(one, range(8)))
    assert loaded(), "no metrics sample was taken while 8 requests were in the engine"
    want = {"llm_requests": before["requests"] + usage["requests"],
            "prompt_tokens": before["prompt_tokens"] + usage["prompt"],
            "completion_tokens": before["completion_tokens"] + usage["completion"]}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        last = reader.serve_metrics("llm", dep)[-1]
        if {k: last[k] for k in want} == want:
            break
        time.sleep(0.2)
    assert {k: last[k] for k in want} == want, "the store's totals differ from the usage the client saw"
    live = serve.status().applications["llm"].deployments[dep].metrics["llm"]
    assert live["completion_tokens"] == want["completion_tokens"] and live["queue_depth"] == 0
    rows = reader.serve_metrics("llm", dep)
    assert any(r["tokens_per_s"] and r["tokens_per_s"] > 0 for r in rows)
    assert all(0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"] for r in rows if r["ttft_samples"])
    assert all(r["queue_depth"] == r["engine_running"] + r["engine_waiting"] for r in rows)
    per_replica = reader.serve_metrics("llm", dep, replica=0)
    assert per_replica and per_replica[-1]["completion_tokens"] == want["completion_tokens"]
    ingress_rows = reader.serve_metrics("llm", "OpenAiIngress")
    assert ingress_rows and ingress_rows[-1]["completion_tokens"] is None  # not an LLM deployment

    board = Dashboard(storage)
    try:
        listed = {d["deployment"]: d for d in httpx.get(board.base + "api/serve", timeout=30).json()["deployments"]}
        assert listed[dep]["last"]["completion_tokens"] == want["completion_tokens"]
        metrics = httpx.get(f"{board.base}api/serve/llm/{dep}/metrics", timeout=30).json()["metrics"]
        assert any(m["ttft_p50_ms"] for m in metrics) and any(m["queue_depth"] for m in metrics)
    finally:
        board.stop()


def test_echo_returns_the_prompt_and_scores_it(client, tiny_model):
    """echo (refused before): the prompt comes back before the completion, plain and streamed; with logprobs
    its tokens are scored (the first has none, as OpenAI's), and max_tokens=0 scores the prompt alone, as
    lm-eval's loglikelihood requests ask. The scores are the plain model's log-softmax."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = "the lazy dog jumps"
    plain = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=4, temperature=0)
    echoed = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=4, temperature=0, echo=True)
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    streamed = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=4, temperature=0, echo=True,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == echoed.choices[0].text
    scored = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    choice = scored.choices[0]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    ids = tok(prompt)["input_ids"]
    with torch.no_grad():
        rows = torch.log_softmax(AutoModelForCausalLM.from_pretrained(tiny_model)(torch.tensor([ids])).logits[0], -1)
    lp = choice.logprobs
    assert choice.text == prompt and scored.usage.completion_tokens == 0 and len(lp.tokens) == len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx([rows[i, t].item() for i, t in enumerate(ids[1:])], abs=1e-4)
    assert all(len(top) >= 2 for top in lp.top_logprobs[1:]) and lp.text_offset[-1] < len(prompt)
    with pytest.raises(openai.BadRequestError, match="max_tokens=0 generates nothing: send echo=true"):
        client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=0)

"""tool_choice "auto": the calls a model writes in its own format, read by the parser its config names
(engine_kwargs enable_auto_tool_choice + tool_call_parser, as Ray Serve LLM passes them to vLLM).

The random tiny model never writes a call by itself, so the end-to-end tests make it write one with a
guided_regex: the server then reads the answer exactly as it reads a real model's."""

from __future__ import annotations

import json
import re

import openai
import pytest
from _uvicorn_app import served

from muster.serve.llm import LLMConfig, LLMConfigError, LLMServer, openai_asgi_app
from muster.serve.llm.tools import CallStream, parse_calls, plan

pytestmark = pytest.mark.timeout(300)

TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
CALL = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
ASK = [{"role": "user", "content": "what time is it?"}]


def test_hermes_and_llama3_json_answers_are_read_as_calls_and_anything_else_as_text():
    head, calls = parse_calls("hermes", f"Let me check.\n{CALL}\n<tool_call>{{\"name\": \"w\", \"arguments\": {{}}}}")
    assert head == "Let me check.\n" and [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                          for c in calls] == [("get_time", {"zone": "UTC"}), ("w", {})]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    for text in ("no call here", "<tool_call>{not json</tool_call>", '<tool_call>{"arguments": {}}</tool_call>'):
        assert parse_calls("hermes", text) == (text, [])
    _, calls = parse_calls("llama3_json", '{"name": "a", "parameters": {"x": "1;2"}}; {"name": "b", "parameters": {}}')
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("a", '{"x": "1;2"}'), ("b", "{}")]
    assert parse_calls("llama3_json", '<|python_tag|>{"name": "a", "parameters": {}}')[1][0]["function"]["name"] == "a"
    assert parse_calls("llama3_json", 'It is {"name"} time') == ('It is {"name"} time', [])


def test_a_stream_sends_text_as_it_comes_and_holds_back_what_may_start_a_call():
    stream = CallStream(plan([TIME], "auto", None, "hermes"))
    pieces = ("Let", " me check.", "\n<tool", "_call>", '{"name": "get_time", ', '"arguments": {}}')
    sent = [stream.feed(t) for t in pieces]
    assert sent == ["Let", " me check.", "\n", "", "", ""]  # "<tool" might have been text: held, then a call
    rest, calls, reason = stream.finish("stop")
    assert rest == "" and reason == "tool_calls" and calls[0]["function"] == {"name": "get_time", "arguments": "{}"}
    text_only = CallStream(plan([TIME], "auto", None, "hermes"))
    assert [text_only.feed(t) for t in ("a <", "b> c <tool")] == ["a ", "<b> c "]
    assert text_only.finish("stop") == ("<tool", [], "stop")  # never a call: what was held is text after all


def test_a_parser_the_server_does_not_have_or_a_missing_one_is_refused_naming_the_choices(tiny_model):
    def config(**kw):
        return LLMConfig(model_loading_config=dict(model_id="m", model_source=str(tiny_model)),
                         llm_engine="transformers", engine_kwargs=kw)

    with pytest.raises(LLMConfigError, match=r"tool_call_parser'\]='mistral'.*\['hermes', 'llama3_json'\]"):
        config(enable_auto_tool_choice=True, tool_call_parser="mistral")
    with pytest.raises(LLMConfigError, match="enable_auto_tool_choice=True needs tool_call_parser"):
        config(enable_auto_tool_choice=True)


@pytest.fixture(scope="module")
def client(tiny_model):
    server = LLMServer(LLMConfig(
        model_loading_config=dict(model_id="tools", model_source=str(tiny_model)), llm_engine="transformers",
        engine_kwargs=dict(max_model_len=512, enable_auto_tool_choice=True, tool_call_parser="hermes"),
    ))
    try:
        with served(openai_asgi_app([server])) as url:
            yield openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
    finally:
        server.shutdown()


def test_auto_tool_choice_answers_with_the_calls_the_model_wrote(client):
    """Refused before (no parser). The model's text before the call stays its content; an answer with no
    call is plain text; streamed, the text comes first and the call in the last chunk."""
    forced = {"guided_regex": re.escape(f"Let me check.\n{CALL}")}
    r = client.chat.completions.create(model="tools", messages=ASK, tools=[TIME], temperature=0, max_tokens=200,
                                       extra_body=forced)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content == "Let me check."
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"zone": "UTC"}
    plain = client.chat.completions.create(model="tools", messages=ASK, tools=[TIME], tool_choice="auto",
                                           max_tokens=40, extra_body={"guided_regex": "Sunny <b>today</b>"})
    assert plain.choices[0].message.content == "Sunny <b>today</b>" and plain.choices[0].message.tool_calls is None
    assert plain.choices[0].finish_reason == "stop"
    chunks = [c.choices[0] for c in client.chat.completions.create(
        model="tools", messages=ASK, tools=[TIME], temperature=0, max_tokens=200, stream=True, extra_body=forced)
        if c.choices]
    assert "".join(c.delta.content or "" for c in chunks).strip() == "Let me check."
    (streamed,) = [d for c in chunks for d in (c.delta.tool_calls or [])]
    assert streamed.index == 0 and streamed.function.name == "get_time" and chunks[-1].finish_reason == "tool_calls"

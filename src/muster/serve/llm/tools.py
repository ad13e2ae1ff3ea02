"""Tool calling (OpenAI's ``tools`` and ``tool_choice``) by structured output, for any chat model.

A request whose ``tool_choice`` forces a call is answered with one, whatever the model: the tools are given
to the chat template (``apply_chat_template(tools=...)``, as the model was trained to read them), and the
output is constrained (:mod:`.engine.structured`) to what the call needs, as vLLM does for these choices:

* ``{"type": "function", "function": {"name": "f"}}``: the output is ``f``'s arguments, a JSON object of
  its ``parameters`` schema; the answer's ``tool_calls`` holds that one call (``finish_reason`` "stop", as
  OpenAI's for a named call);
* ``"required"``: the output is a JSON array of ``{"name": ..., "arguments": {...}}``, one or more (one
  with ``parallel_tool_calls=false``), each naming a tool and holding arguments of its schema; the answer's
  ``tool_calls`` holds them (``finish_reason`` "tool_calls").

``"auto"`` (the default when tools are given) lets the model choose between text and calls written in its
own format, so the answer is read by a parser of that format, named as vLLM names them in the model's
``engine_kwargs``: ``enable_auto_tool_choice=True, tool_call_parser="hermes"`` (``<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`` blocks: Qwen 2.5 and 3, Hermes) or ``"llama3_json"`` (an answer that is a
JSON object ``{"name": ..., "parameters": {...}}``, or several joined by ``;``: Llama 3.1 and later). A model
configured without one refuses ``"auto"``, naming the choices that work. ``"none"`` answers in text, the tools
left out of the prompt.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from muster.serve.llm.engine.base import StructuredOutput
from muster.serve.llm.errors import InvalidRequestError

_NO_ARGUMENTS = {"type": "object", "properties": {}}

#: The tool-call formats ``tool_call_parser`` names (vLLM's names), each with what starts a call in a reply.
PARSERS = {"hermes": "<tool_call>", "llama3_json": "<|python_tag|>"}
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolPlan:
    """How a chat request calls its tools: ``tools`` for the chat template, and the call it must make."""

    tools: tuple[dict[str, Any], ...]  # as the request gave them (OpenAI's shape, which chat templates read)
    named: Tool | None  # tool_choice names this one
    allowed: tuple[Tool, ...]  # tool_choice "required": one of these, or more
    parallel: bool
    parser: str | None = None  # tool_choice "auto": the model's format (PARSERS), read from its free answer

    @property
    def finish_reason(self) -> str:
        return "stop" if self.named is not None else "tool_calls"

    def structured(self) -> StructuredOutput | None:
        """What the output must be: the named tool's arguments, or an array of calls of the allowed ones;
        None under ``"auto"`` (the model answers freely)."""
        if self.parser is not None:
            return None
        if self.named is not None:
            return StructuredOutput("json", json.dumps(self.named.parameters))
        call = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                 "properties": {"name": {"const": t.name}, "arguments": t.parameters}} for t in self.allowed]
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": call}}
        if not self.parallel:
            schema["maxItems"] = 1
        return StructuredOutput("json", json.dumps(schema))

    def answer(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """The text and OpenAI's ``tool_calls`` of a whole output ``text``: under ``"auto"`` the calls the
        parser finds (none: all text), else the calls ``structured()`` made it write (no text)."""
        if self.parser is not None:
            head, calls = parse_calls(self.parser, text)
            return (head.strip() or None, calls) if calls else (text, [])
        if self.named is not None:
            return None, [_call(self.named.name, text)]
        return None, [_call(c["name"], json.dumps(c["arguments"])) for c in json.loads(text)]


def parse_calls(parser: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """The text before the calls and the calls of a model's free answer in ``parser``'s format; an answer
    with no call in it, or one whose call is no JSON of a name and arguments, is all text (as vLLM's)."""
    marker = PARSERS[parser]
    head, found_marker, body = text.partition(marker)
    if parser == "hermes":
        found = [_named_call(raw) for raw in _HERMES.findall(marker + body)] if found_marker else []
    else:  # llama3_json: after the marker, or the whole answer when it opens with "{": objects joined by ";"
        if not found_marker:
            head, body = "", text
        found = _json_objects(body) if found_marker or text.lstrip().startswith("{") else []
    if not found or None in found:
        return text, []
    return head, [c for c in found if c is not None]


def _json_objects(text: str) -> list[dict[str, Any] | None]:
    """The calls of JSON objects joined by ``;`` (a None for any part that is not one)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        at = len(text) - len(text[at:].lstrip(" \t\n;"))
        if at >= len(text):
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return [None]
        found.append(_named_call(value, "parameters"))
    return found


def _named_call(raw: Any, arguments: str = "arguments") -> dict[str, Any] | None:
    """A call of a JSON object (or its text) holding a ``name`` and its ``arguments``; None if it is not one."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get(arguments, value.get("arguments", {}))
    return _call(value["name"], args if isinstance(args, str) else json.dumps(args))


@dataclass
class CallStream:
    """A streamed tool-calling answer: the text to send as it comes, and the calls once it is whole.

    Forced calls (named, ``"required"``) send nothing until the end. Under ``"auto"`` text streams as usual,
    except text that is, or may become, the start of a call (the parser's marker, or a JSON object opening
    a ``llama3_json`` answer): that is held back, and from a call's start on, all of it, until the end.
    """

    plan: ToolPlan
    _text: list[str] = field(default_factory=list)
    _held: str = ""  # generated and not sent yet: what may be the start of a call
    _sent: int = 0
    _calling: bool = False

    def feed(self, text: str) -> str:
        """The text to send now, of ``text`` newly generated (only the text not sent yet is looked at again)."""
        self._text.append(text)
        if self.plan.parser is None or self._calling:
            return ""
        held = self._held + text
        marker = PARSERS[self.plan.parser]
        # llama3_json's answer may open with a JSON object; until one that does not has begun, nothing is sent
        opening = self.plan.parser == "llama3_json" and not self._sent
        cut = held.find(marker)
        if cut >= 0 or (opening and held.lstrip().startswith("{")):
            self._calling = True
            out = held[:cut] if cut >= 0 else ""
        elif opening and not held.strip():
            out = ""
        else:
            keep = next((k for k in range(min(len(marker) - 1, len(held)), 0, -1) if marker.startswith(held[-k:])), 0)
            out = held[:len(held) - keep]
        self._held = held[len(out):]
        self._sent += len(out)
        return out

    def finish(self, reason: str) -> tuple[str, list[dict[str, Any]], str]:
        """At the end (``reason``: the engine's finish reason): the text still to send, the calls, and the
        finish reason to send. An answer cut by ``max_tokens`` comes as text."""
        whole = "".join(self._text)
        if reason != "stop":
            return whole[self._sent:], [], reason
        if self.plan.parser is None:
            return "", self.plan.answer(whole)[1], self.plan.finish_reason
        head, calls = parse_calls(self.plan.parser, whole)
        if not calls:
            return whole[self._sent:], [], reason
        return head[self._sent:], calls, self.plan.finish_reason


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def plan(tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None,
         parser: str | None = None) -> ToolPlan | None:
    """The request's tool plan; None when it answers in text (no tools, or ``tool_choice="none"``).
    ``parser``: the model's ``tool_call_parser`` where ``enable_auto_tool_choice`` is set.

    Raises:
        InvalidRequestError: a malformed tool or ``tool_choice``, a named tool that is not among ``tools``, or
            ``tool_choice="auto"`` for a model with no parser (named, with the choices that work).
    """
    if not tools:
        if tool_choice not in (None, "none", "auto"):
            raise InvalidRequestError(f"tool_choice={tool_choice!r} needs tools; send the tools it may call.",
                                      param="tool_choice")
        return None
    if tool_choice == "none":
        return None
    declared = [_tool(i, t) for i, t in enumerate(tools)]
    by_name = {t.name: t for t in declared}
    if tool_choice in (None, "auto"):
        if parser is not None:
            return ToolPlan(tuple(tools), None, tuple(declared), parallel_tool_calls is not False, parser)
        raise InvalidRequestError(
            "tool_choice='auto' (the default with tools) lets the model choose between text and a call in its own "
            "format, which needs a parser of that format, and this model has none: serve it with engine_kwargs "
            "enable_auto_tool_choice=True and tool_call_parser='hermes' or 'llama3_json' (vLLM's names), or send "
            "tool_choice='required' (the model calls one or more of the tools) or {'type': 'function', "
            "'function': {'name': ...}} (it calls that one), or 'none' for text.", param="tool_choice",
        )
    if tool_choice == "required":
        return ToolPlan(tuple(tools), None, tuple(declared), parallel_tool_calls is not False)
    name = ((tool_choice.get("function") or {}).get("name") if isinstance(tool_choice, dict)
            and tool_choice.get("type") == "function" else None)
    if not isinstance(name, str):
        raise InvalidRequestError(
            f"tool_choice={tool_choice!r} is not valid: send 'none', 'required', or "
            "{'type': 'function', 'function': {'name': <one of the tools>}}.", param="tool_choice",
        )
    if name not in by_name:
        raise InvalidRequestError(f"tool_choice names the function {name!r}, which is not among the tools "
                                  f"{sorted(by_name)}.", param="tool_choice")
    return ToolPlan(tuple(tools), by_name[name], (), parallel_tool_calls is not False)


def _tool(index: int, tool: Any) -> Tool:
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise InvalidRequestError(
            f"tools[{index}] is {tool!r}: send {{'type': 'function', 'function': {{'name': ..., 'parameters': "
            "<a JSON schema>}}}.", param=f"tools.{index}",
        )
    parameters = function.get("parameters")
    if parameters is None:
        parameters = _NO_ARGUMENTS
    if not isinstance(parameters, dict):
        raise InvalidRequestError(f"tools[{index}].function.parameters is {parameters!r}: send a JSON schema "
                                  "object (e.g. {'type': 'object', 'properties': {...}}).", param=f"tools.{index}")
    return Tool(name, parameters)


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as chat templates read it: an assistant's earlier ``tool_calls`` with their arguments
    as objects (templates write them with ``tojson``; a JSON string would be quoted twice)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    out = []
    for call in calls:
        function = dict((call or {}).get("function") or {})
        try:
            function["arguments"] = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            pass  # kept as sent
        out.append({**call, "function": function})
    return {**message, "tool_calls": out}

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

``"auto"`` (the default when tools are given) lets the model choose between text and a call written in its
own format (Hermes' ``<tool_call>`` tags, Llama's JSON, ...), which needs a parser for that format; this
server has none, so it is refused naming the two choices that work. ``"none"`` answers in text, the tools
left out of the prompt.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from muster.serve.llm.engine.base import StructuredOutput
from muster.serve.llm.errors import InvalidRequestError

_NO_ARGUMENTS = {"type": "object", "properties": {}}


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

    @property
    def finish_reason(self) -> str:
        return "stop" if self.named is not None else "tool_calls"

    def structured(self) -> StructuredOutput:
        """What the output must be: the named tool's arguments, or an array of calls of the allowed ones."""
        if self.named is not None:
            return StructuredOutput("json", json.dumps(self.named.parameters))
        call = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                 "properties": {"name": {"const": t.name}, "arguments": t.parameters}} for t in self.allowed]
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": call}}
        if not self.parallel:
            schema["maxItems"] = 1
        return StructuredOutput("json", json.dumps(schema))

    def calls(self, text: str) -> list[dict[str, Any]]:
        """OpenAI's ``tool_calls`` of a whole output ``text`` (one that ``structured()`` constrained)."""
        if self.named is not None:
            return [_call(self.named.name, text)]
        return [_call(c["name"], json.dumps(c["arguments"])) for c in json.loads(text)]


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def plan(tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None) -> ToolPlan | None:
    """The request's tool plan; None when it answers in text (no tools, or ``tool_choice="none"``).

    Raises:
        InvalidRequestError: a malformed tool or ``tool_choice``, a named tool that is not among ``tools``, or
            ``tool_choice="auto"`` (named, with the choices that work).
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
        raise InvalidRequestError(
            "tool_choice='auto' (the default with tools) lets the model choose between text and a call in its own "
            "format, which needs a parser of that format; this server has none. Send tool_choice='required' (the "
            "model calls one or more of the tools) or {'type': 'function', 'function': {'name': ...}} (it calls "
            "that one), or tool_choice='none' for text.", param="tool_choice",
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

"""OpenAI's wire format, declared once: request bodies (validated) and response bodies.

Requests are parsed with :func:`parse_request`, which turns pydantic's errors
into an :class:`InvalidRequestError` naming the field, so a bad body gets
OpenAI's 400 error shape. Responses are built from these models and dumped
with ``model_dump(exclude_none=...)`` exactly as the official client expects.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from muster.exceptions import InvalidArgumentError
from muster.serve.llm.engine.base import StructuredOutput
from muster.serve.llm.errors import InvalidRequestError

MAX_N = 16
MAX_STOP = 4

MAX_TOP_LOGPROBS = 20  # OpenAI's top_logprobs limit; vLLM's default max_logprobs, on both routes

# vLLM's extra sampling parameters (sent with the openai client's ``extra_body``), each with the values that
# mean "off". Ray Serve LLM passes them to vLLM; these engines do not implement them, so any other value is
# refused by name rather than ignored. (A null was already turned into "left out".) ``top_k``,
# ``repetition_penalty`` and those of :data:`VLLM_EXTRAS` are implemented (:meth:`_SamplingRequest.vllm_extras`).
VLLM_EXTRA_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "length_penalty": (1,), "use_beam_search": (False,), "include_stop_str_in_output": (False,),
    "skip_special_tokens": (True,), "spaces_between_special_tokens": (True,),
    "bad_words": ([],), "prompt_logprobs": (), "truncate_prompt_tokens": (),
    "structured_outputs": (), "logits_processors": (),
}

#: vLLM's extra sampling parameters these engines implement: each one's check and what it must be.
VLLM_EXTRAS: dict[str, tuple[Any, str]] = {
    "min_p": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1, "a number in 0..1"),
    "min_tokens": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "ignore_eos": (lambda v: isinstance(v, bool), "true or false"),
    "allowed_token_ids": (lambda v: isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool)
                                                                      for t in v), "a non-empty list of token ids"),
    "stop_token_ids": (lambda v: isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                                             for t in v), "a list of token ids"),
}


class _Request(BaseModel):
    # Fields OpenAI defines that this server does not use (user, metadata, ...) are accepted and ignored.
    # Strict: "0.5" for a number or true for a count is refused, as OpenAI refuses them, not converted.
    model_config = ConfigDict(extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """A field sent as null takes its default, as OpenAI's "... or null" fields do (n, stream, ...)."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class StreamOptions(_Request):
    include_usage: bool = False


class ContentPart(_Request):
    type: str
    text: str | None = None


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool's answer: to which call

    def for_template(self) -> dict[str, Any]:
        """The message as a chat template reads it: role and text, and the tool fields it has."""
        out: dict[str, Any] = {"role": self.role, "content": self.text()}
        for name in ("name", "tool_calls", "tool_call_id"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def text(self) -> str:
        """The message's text (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)

    def check_supported(self, index: int) -> None:
        """Text only: an image, audio or file part is refused by name (not dropped)."""
        for j, part in enumerate(self.content if isinstance(self.content, list) else []):
            if part.type != "text" or part.text is None:
                raise InvalidRequestError(
                    f"messages.{index}.content.{j}: content parts of type {part.type!r} are not supported; this "
                    "server's models take text only (send {'type': 'text', 'text': ...} parts or a string).",
                    param=f"messages.{index}.content",
                )


class _SamplingRequest(_Request):
    model_config = ConfigDict(extra="allow")  # kept (unvalidated) so vLLM's extra parameters can be checked

    model: str
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)  # null: 1, as OpenAI's "integer or null"
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    # structured output (OpenAI's response_format, vLLM's guided_json/_regex/_choice), tool calling (chat
    # only: see muster.serve.llm.tools); the legacy functions and guided_grammar are read only to be refused
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOP or any(not s for s in stops):
            raise InvalidArgumentError(f"stop takes up to {MAX_STOP} non-empty strings")  # the error adds the value
        return value


    def top_k_value(self) -> int:
        """vLLM's ``top_k`` (an extra body field): -1 when left out; -1 and 0 both mean every token.

        Raises:
            InvalidRequestError: not an integer, or below -1.
        """
        value = (self.model_extra or {}).get("top_k")
        if value is None:
            return -1
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise InvalidRequestError(
                f"top_k={value!r} is not valid: send a positive integer (sample among the k most likely tokens), "
                "or -1 or 0 to sample among all tokens.", param="top_k",
            )
        return value

    def repetition_penalty_value(self) -> float:
        """vLLM's ``repetition_penalty`` (an extra body field): 1.0 (off) when left out.

        Raises:
            InvalidRequestError: not a number above 0.
        """
        value = (self.model_extra or {}).get("repetition_penalty")
        if value is None:
            return 1.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2:
            raise InvalidRequestError(
                f"repetition_penalty={value!r} is not valid: send a number in (0, 2] (above 1 discourages "
                "repeating the prompt's and the output's tokens, 1 is off).", param="repetition_penalty",
            )
        return float(value)

    def vllm_extras(self, max_tokens: int | None) -> dict[str, Any]:
        """vLLM's extra sampling parameters of :data:`VLLM_EXTRAS` the request sent (lists as tuples).

        Raises:
            InvalidRequestError: one of the wrong type or range, or min_tokens above max_tokens (named).
        """
        found: dict[str, Any] = {}
        for name, (ok, wanted) in VLLM_EXTRAS.items():
            value = (self.model_extra or {}).get(name)
            if value is None:
                continue
            if not ok(value):
                raise InvalidRequestError(f"{name}={value!r} is not valid: send {wanted}.", param=name)
            found[name] = tuple(value) if isinstance(value, list) else value
        if max_tokens is not None and found.get("min_tokens", 0) > max_tokens:
            raise InvalidRequestError(f"min_tokens={found['min_tokens']} is above max_tokens={max_tokens}; send "
                                      "min_tokens <= max_tokens.", param="min_tokens")
        return found

    def logit_bias_pairs(self) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as ``(token id, bias)`` pairs, as OpenAI checks it: keys are token ids, biases -100..100.

        Raises:
            InvalidRequestError: a key that is no token id, or a bias out of range.
        """
        pairs = []
        for key, bias in (self.logit_bias or {}).items():
            if not key.isdecimal():
                raise InvalidRequestError(
                    f"logit_bias key {key!r} is not a token id: send non-negative integers (as strings in JSON), "
                    "the ids of the model's tokenizer.", param="logit_bias",
                )
            if not -100 <= bias <= 100:
                raise InvalidRequestError(
                    f"logit_bias[{key!r}]={bias!r} is out of range: send a bias from -100 (never that token) to 100 "
                    "(only that token).", param="logit_bias",
                )
            pairs.append((int(key), float(bias)))
        return tuple(pairs)

    def structured_output(self) -> StructuredOutput | None:
        """What the output must be: OpenAI's ``response_format`` (``json_object``, ``json_schema``) or one of
        vLLM's ``guided_json``, ``guided_regex``, ``guided_choice``; None for free text.

        Raises:
            InvalidRequestError: an unknown ``response_format`` type, a ``json_schema`` without a schema, a
                guided value of the wrong type, or more than one constraint (each named).
        """
        given = [name for name in ("guided_json", "guided_regex", "guided_choice") if getattr(self, name) is not None]
        if not _is_text(self.response_format):
            given.insert(0, "response_format")
        if len(given) > 1:
            raise InvalidRequestError(f"{' and '.join(given)} both constrain the output; send one of them.",
                                      param=given[1])
        if not given:
            return None
        if given[0] == "response_format":
            return _response_format(self.response_format or {})
        value = getattr(self, given[0])
        if given[0] == "guided_json" and isinstance(value, (dict, str)):
            return StructuredOutput("json", value if isinstance(value, str) else json.dumps(value))
        if given[0] == "guided_regex" and isinstance(value, str):
            return StructuredOutput("regex", value)
        if given[0] == "guided_choice" and isinstance(value, list) and value and all(isinstance(c, str) for c in value):
            return StructuredOutput("choice", choices=tuple(value))
        wanted = {"guided_json": "a JSON schema (an object)", "guided_regex": "a regular expression (a string)",
                  "guided_choice": "a non-empty list of strings"}[given[0]]
        raise InvalidRequestError(f"{given[0]}={value!r} is not valid: send {wanted}.", param=given[0])

    def stop_list(self) -> list[str]:
        """``stop`` as a list."""
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def check_supported(self) -> None:
        """Reject sampling options this server does not implement (rather than ignore them silently)."""
        if self.stream_options is not None and not self.stream:
            raise InvalidRequestError("stream_options is only allowed when stream is true; leave it out or set "
                                      "stream: true.", param="stream_options")
        if self.functions:
            raise InvalidRequestError("functions (OpenAI's deprecated function calling) is not supported; send "
                                      "them as tools=[{'type': 'function', 'function': {...}}].", param="functions")
        if self.tools and not isinstance(self, ChatCompletionRequest):
            raise InvalidRequestError("tools are for /v1/chat/completions; leave them out of /v1/completions.",
                                      param="tools")
        if self.guided_grammar is not None:
            raise InvalidRequestError("guided_grammar (vLLM's grammar-guided decoding) is not supported; use "
                                      "guided_json, guided_regex, guided_choice or response_format.",
                                      param="guided_grammar")
        for name, value in (self.model_extra or {}).items():
            defaults = VLLM_EXTRA_DEFAULTS.get(name)
            if defaults is not None and not any(_same(value, d) for d in defaults):
                off = f" or send {' / '.join(repr(d) for d in defaults)}" if defaults else ""
                raise InvalidRequestError(
                    f"{name}={value!r} (a vLLM sampling parameter) is not supported by this server's engines; "
                    f"leave it out{off}.", param=name,
                )


def _is_text(response_format: dict[str, Any] | None) -> bool:
    return (response_format or {}).get("type", "text") == "text"


def _response_format(response_format: dict[str, Any]) -> StructuredOutput:
    """OpenAI's ``response_format`` other than text as a :class:`StructuredOutput`."""
    kind = response_format.get("type")
    if kind == "json_object":
        return StructuredOutput("json", '{"type": "object"}')
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequestError(
                f"response_format.json_schema.schema is {schema!r}: send the JSON schema the output must follow, "
                "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}.", param="response_format",
            )
        return StructuredOutput("json", json.dumps(schema))
    raise InvalidRequestError(
        f"response_format type {kind!r} is not supported: send 'text', 'json_object' or 'json_schema'.",
        param="response_format",
    )


def _same(value: Any, default: Any) -> bool:
    """``value == default`` without Python's ``True == 1``: a bool only matches a bool."""
    return isinstance(value, bool) == isinstance(default, bool) and value == default


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage]
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    def logprobs_count(self) -> int | None:
        """How many alternatives per token to return (None: no logprobs).

        Raises:
            InvalidRequestError: ``top_logprobs`` without ``logprobs: true`` (OpenAI's 400).
        """
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise InvalidRequestError(
                    "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled "
                    f"(got top_logprobs={self.top_logprobs} with logprobs={self.logprobs!r}); send logprobs: true "
                    "as well, or leave top_logprobs out.", param="top_logprobs",
                )
            return None
        return self.top_logprobs or 0

    def token_limit(self) -> int | None:
        """``max_completion_tokens``, else the older ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)  # 0: with echo, the prompt scored and nothing generated
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    best_of: int | None = None


class EmbeddingRequest(_Request):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


R = TypeVar("R", bound=BaseModel)


def parse_request(cls: type[R], body: Any) -> R:
    """Validate a decoded JSON body as ``cls``.

    Raises:
        InvalidRequestError: the body is not an object or a field is missing or bad
            (the message names the field and what was wrong).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(body_not_an_object(body))
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequestError(f"{param}: {first['msg']} (got {first.get('input')!r})", param=param) from None


def body_not_an_object(body: Any) -> str:
    """What to say of a request body that decoded to something other than a JSON object."""
    got = "nothing (the body is empty)" if body is None else f"a JSON {type(body).__name__} ({body!r:.60})"
    return f"the request body must be a JSON object such as {{\"model\": ..., ...}}, got {got}"


# ----------------------------------------------------------------------------- responses
def new_id(prefix: str) -> str:
    """An id such as ``chatcmpl-3f2a...``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    """OpenAI's ``created``: whole seconds since the epoch."""
    return int(time.time())


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI's: id, type "function", function {name, arguments}

    @model_serializer(mode="wrap")
    def _calls_when_made(self, handler: Any) -> dict[str, Any]:
        """As OpenAI's: ``tool_calls`` only in an answer that made calls (``content`` is null then)."""
        out: dict[str, Any] = handler(self)
        if out.get("tool_calls") is None:
            out.pop("tool_calls", None)
        return out


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    """A chat choice's ``logprobs``: one entry per generated token."""

    content: list[ChatTokenLogprob] | None


class CompletionLogprobs(BaseModel):
    """A legacy completion choice's ``logprobs``: parallel lists, one item per generated token."""

    tokens: list[str]
    token_logprobs: list[float | None]  # (None: an echoed prompt's first token, which nothing comes before)
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI's: each with its index, then id/type/function parts

    @model_serializer(mode="wrap")
    def _present_only(self, handler: Any) -> dict[str, Any]:
        """As OpenAI's: ``role`` in the first chunk only, ``content`` and ``tool_calls`` where there are some."""
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "muster"
    root: str | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]

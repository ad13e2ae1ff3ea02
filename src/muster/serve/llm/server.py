"""``LLMServer``: one model's OpenAI endpoints over an engine.

:meth:`LLMServer.handle` answers one request as an async stream of parts: a
:class:`ResponseHead` (status, streaming or not) first, then the body as
strings (one JSON document, or SSE events ending with ``data: [DONE]``).
Because the head comes first and every part is plain data, the same stream
works in-process and through a Serve deployment handle, and the ingress turns
it into an HTTP response without knowing about engines.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import struct
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from muster.serve.llm import protocol as p
from muster.serve.llm import tools
from muster.serve.llm.config import LLMConfig
from muster.serve.llm.engine import GenerationChunk, LLMEngine, SamplingParams, TokenLogprob, create_engine
from muster.serve.llm.engine.base import StructuredOutput
from muster.serve.llm.errors import EngineError, InvalidRequestError, LLMRequestError, error_body
from muster.serve.llm.metrics import LLMMeter

logger = logging.getLogger(__name__)

ROUTES = ("chat/completions", "completions", "embeddings")


@dataclass(frozen=True)
class ResponseHead:
    """First part of every answer: the HTTP status and whether the body is an SSE stream."""

    status: int
    streaming: bool


Part = ResponseHead | str


class LLMServer:
    """Serves one :class:`LLMConfig`'s model: loads its engine, answers OpenAI requests for it.

    Args:
        llm_config: the model to serve (an ``LLMConfig`` or a dict of its fields).
    """

    def __init__(self, llm_config: LLMConfig | dict[str, Any]):
        self.config = llm_config if isinstance(llm_config, LLMConfig) else LLMConfig(**llm_config)
        self.engine: LLMEngine = create_engine(self.config)
        self.engine.start()
        self.created = p.now()
        self.meter = LLMMeter()

    @property
    def model_id(self) -> str:
        return self.config.model_id

    def model_card(self) -> dict[str, Any]:
        """This model's entry in ``/v1/models``."""
        return p.ModelCard(id=self.model_id, created=self.created, root=self.config.model_source).model_dump()

    def check_health(self) -> None:
        """Raise if the engine can no longer serve."""
        self.engine.check_health()

    def stats(self) -> dict[str, Any]:
        """The engine's counters as a dict (steps, running, waiting, tokens/s, time to first token)."""
        s = self.engine.stats()
        ttft = sorted(s.ttft_s)
        return {
            "model": self.model_id, "steps": s.steps, "running": s.running, "waiting": s.waiting,
            "requests_finished": s.requests_finished, "generated_tokens": s.generated_tokens,
            "tokens_per_s": s.tokens_per_s, "ttft_p50_s": ttft[len(ttft) // 2] if ttft else None,
            **self.meter.counts(),
        }

    def __muster_llm_metrics__(self, ack: int = 0) -> dict[str, Any]:
        """Serve's replica reads this with its stats: token counts, time to first token samples (those after
        ``ack``), engine queue."""
        s = self.engine.stats()
        return self.meter.snapshot(s.running, s.waiting, ack)

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __del__(self) -> None:  # Serve calls it when it stops the replica: the engine's processes end too
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()

    async def handle(self, route: str, body: Any) -> AsyncIterator[Part]:
        """Answer one request to ``/v1/<route>``; yields a :class:`ResponseHead`, then body strings."""
        t0 = time.perf_counter()
        try:
            if route != "embeddings" and self.config.embeds_only:
                raise InvalidRequestError(
                    f"model {self.model_id!r} is served for embeddings (engine_kwargs task="
                    f"{self.config.engine_kwargs['task']!r}), so /v1/{route} is not offered; use /v1/embeddings, "
                    "or serve the model without task='embed' to generate text.", param="model",
                )
            if route == "chat/completions":
                parts = await self._chat(p.parse_request(p.ChatCompletionRequest, body), t0)
            elif route == "completions":
                parts = await self._completions(p.parse_request(p.CompletionRequest, body), t0)
            elif route == "embeddings":
                parts = await self._embeddings(p.parse_request(p.EmbeddingRequest, body))
            else:
                raise InvalidRequestError(f"unknown route /v1/{route}; this server answers {ROUTES}")
        except Exception as exc:  # every failure before the first byte becomes OpenAI's error shape
            error = _as_request_error(exc)
            yield ResponseHead(error.status, streaming=False)
            yield json.dumps(error_body(error))
            return
        streaming = not isinstance(parts, str)
        yield ResponseHead(200, streaming=streaming)
        if isinstance(parts, str):
            yield parts
            return
        try:
            async with contextlib.aclosing(parts):
                async for part in parts:
                    yield part
        except Exception as exc:  # the stream has started: report the error as an SSE event, then end it
            yield f"data: {json.dumps(error_body(_as_request_error(exc)))}\n\n"
            yield "data: [DONE]\n\n"

    # ------------------------------------------------------------------ chat
    async def _chat(self, req: p.ChatCompletionRequest, t0: float) -> str | AsyncGenerator[str, None]:
        req.check_supported()
        for i, message in enumerate(req.messages):
            message.check_supported(i)
        if not req.messages:
            raise InvalidRequestError("messages is empty: send at least one message", param="messages")
        top = req.logprobs_count()
        calling = tools.plan(req.tools, req.tool_choice, req.parallel_tool_calls, self.config.tool_call_parser)
        structured = req.structured_output()
        if calling is not None and calling.parser is None and structured is not None:
            raise InvalidRequestError("tool_choice and response_format (or guided_*) both constrain the output; "
                                      "send one of them.", param="tool_choice")
        messages = [tools.template_message(m.for_template()) for m in req.messages]
        prompt = self.engine.encode_chat(messages, tools=None if calling is None else list(calling.tools))
        params = _sampling(req, req.token_limit(), top, calling.structured() if calling and not calling.parser
                           else structured)
        try:
            streams = await self._open([(prompt, params)] * req.n, len(prompt), t0)
        except InvalidRequestError as exc:  # a prompt too long is the messages' fault here, as OpenAI names it
            if exc.param == "prompt":
                exc.param = "messages"
            raise
        rid, created = p.new_id("chatcmpl"), p.now()
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return self._chat_events(streams, rid, created, include_usage, top is not None, calling)
        results = await _collect(streams)
        choices = []
        for i, (text, reason, _, lps) in enumerate(results):
            answer = p.AssistantMessage(content=text)
            if calling is not None and reason == "stop":  # a whole answer (one cut by max_tokens stays text)
                content, calls = calling.answer(text)
                if calls:
                    answer, reason = p.AssistantMessage(content=content, tool_calls=calls), calling.finish_reason
            choices.append(p.ChatChoice(index=i, message=answer, finish_reason=reason,
                                        logprobs=_chat_logprobs(lps) if top is not None else None))
        usage = _usage(len(prompt), sum(r[2] for r in results))
        return p.ChatCompletion(id=rid, created=created, model=self.model_id, choices=choices,
                                usage=usage).model_dump_json()

    async def _chat_events(self, streams: list[_Primed], rid: str, created: int, include_usage: bool,
                           logprobs: bool, calling: tools.ToolPlan | None) -> AsyncGenerator[str, None]:
        def event(choices: list[p.ChatChunkChoice], usage: p.Usage | None = None) -> str:
            chunk = p.ChatCompletionChunk(id=rid, created=created, model=self.model_id, choices=choices, usage=usage)
            # OpenAI's chunks carry finish_reason and logprobs (null until the end) and leave usage out
            # unless stream_options asked for it (then it is null until the last chunk)
            return f"data: {chunk.model_dump_json(exclude=None if include_usage else {'usage'})}\n\n"

        for i in range(len(streams)):
            yield event([p.ChatChunkChoice(index=i, delta=p.ChatDelta(role="assistant", content=""))])
        counts = [0] * len(streams)
        calls = [tools.CallStream(calling) for _ in streams] if calling is not None else []
        async with contextlib.aclosing(_merge(streams)) as merged:
            async for i, chunk in merged:
                counts[i] = chunk.num_generated_tokens
                text, reason, delta = chunk.text, chunk.finish_reason, p.ChatDelta()
                if calls:
                    text, made = calls[i].feed(text), list[dict[str, Any]]()
                    if reason is not None:
                        rest, made, reason = calls[i].finish(reason)
                        text += rest
                    delta = p.ChatDelta(tool_calls=[{"index": k, **c} for k, c in enumerate(made)] or None)
                if text:
                    delta.content = text
                lps = _chat_logprobs(chunk.logprobs) if logprobs else None
                yield event([p.ChatChunkChoice(index=i, delta=delta, finish_reason=reason, logprobs=lps)])
        if include_usage:
            yield event([], _usage(streams[0].prompt_tokens, sum(counts)))
        yield "data: [DONE]\n\n"

    # ------------------------------------------------------------------ completions
    async def _completions(self, req: p.CompletionRequest, t0: float) -> str | AsyncGenerator[str, None]:
        req.check_supported()
        if req.suffix is not None:
            raise InvalidRequestError(f"suffix={req.suffix!r} is not supported; leave it out.", param="suffix")
        if req.max_tokens == 0 and not req.echo:
            raise InvalidRequestError("max_tokens=0 generates nothing: send echo=true (to score the prompt) or "
                                      "max_tokens >= 1.", param="max_tokens")
        if req.best_of not in (None, 1, req.n):
            raise InvalidRequestError(f"best_of={req.best_of} is not supported; leave it out.", param="best_of")
        given = _prompt_list(req.prompt, "prompt")
        prompts = [self._prompt_ids(x) for x in given]
        params = _sampling(req, req.max_tokens, req.logprobs, req.structured_output())
        prompt_tokens = sum(len(ids) for ids in prompts)
        echoed = [await self._echo(x, ids, req.logprobs) for x, ids in zip(given, prompts)] if req.echo else []
        echoes = [e for e in echoed for _ in range(req.n)]
        if req.max_tokens == 0:  # the prompts, scored (lm-eval's loglikelihood requests)
            self.meter.started(prompt_tokens, time.perf_counter() - t0)
            return _echoed_only(echoes, self.model_id, prompt_tokens, req)
        streams = await self._open([(ids, params) for ids in prompts for _ in range(req.n)], prompt_tokens, t0)
        rid, created = p.new_id("cmpl"), p.now()
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return self._completion_events(streams, rid, created, include_usage, prompt_tokens,
                                           req.logprobs is not None, echoes)
        results = await _collect(streams)
        echoes = echoes or [("", [])] * len(results)
        choices = [p.CompletionChoice(index=i, text=head + text, finish_reason=reason,
                                      logprobs=_legacy_logprobs([*before, *lps], 0) if req.logprobs is not None
                                      else None)
                   for i, ((text, reason, _, lps), (head, before)) in enumerate(zip(results, echoes))]
        return p.Completion(id=rid, created=created, model=self.model_id, choices=choices,
                            usage=_usage(prompt_tokens, sum(r[2] for r in results))).model_dump_json()

    async def _completion_events(self, streams: list[_Primed], rid: str, created: int, include_usage: bool,
                                 prompt_tokens: int, logprobs: bool,
                                 echoes: list[tuple[str, list[TokenLogprob]]]) -> AsyncGenerator[str, None]:
        counts, offsets = [0] * len(streams), [0] * len(streams)
        for i, (head, before) in enumerate(echoes):  # echo: each choice's prompt first
            choice = p.CompletionChoice(index=i, text=head, finish_reason=None,
                                        logprobs=_legacy_logprobs(before, 0) if logprobs else None)
            offsets[i] = sum(len(e.token) for e in before)
            body = p.Completion(id=rid, created=created, model=self.model_id, choices=[choice])
            yield f"data: {body.model_dump_json(exclude=None if include_usage else {'usage'})}\n\n"
        async with contextlib.aclosing(_merge(streams)) as merged:
            async for i, chunk in merged:
                counts[i] = chunk.num_generated_tokens
                lps = _legacy_logprobs(chunk.logprobs, offsets[i]) if logprobs else None
                offsets[i] += sum(len(e.token) for e in chunk.logprobs)
                choice = p.CompletionChoice(index=i, text=chunk.text, finish_reason=chunk.finish_reason, logprobs=lps)
                body = p.Completion(id=rid, created=created, model=self.model_id, choices=[choice])
                yield f"data: {body.model_dump_json(exclude=None if include_usage else {'usage'})}\n\n"
        if include_usage:
            body = p.Completion(id=rid, created=created, model=self.model_id, choices=[],
                                usage=_usage(prompt_tokens, sum(counts)))
            yield f"data: {body.model_dump_json()}\n\n"
        yield "data: [DONE]\n\n"

    async def _open(self, requests: Sequence[tuple[list[int], SamplingParams]], prompt_tokens: int,
                    t0: float) -> list[_Primed]:
        """Start the request's generations and read their first chunks; meter it (prompt tokens as in its usage)."""
        streams = await _open(requests, self.engine, self.meter)
        self.meter.started(prompt_tokens, time.perf_counter() - t0)
        return streams

    async def _echo(self, given: str | list[int], ids: list[int], top: int | None) -> tuple[str, list[TokenLogprob]]:
        """``echo``: a prompt's text (as sent, or its tokens' text) and, when logprobs are asked, its tokens'."""
        scored = await self.engine.prompt_logprobs(ids, top) if top is not None else []
        return (given if isinstance(given, str) else self.engine.decode(ids)), scored

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        return self.engine.encode(prompt) if isinstance(prompt, str) else list(prompt)

    # ------------------------------------------------------------------ embeddings
    async def _embeddings(self, req: p.EmbeddingRequest) -> str:
        if req.dimensions is not None:
            raise InvalidRequestError("dimensions is not supported by this model; leave it out.", param="dimensions")
        inputs = [self._prompt_ids(x) for x in _prompt_list(req.input, "input")]
        try:
            vectors = await self.engine.embed(inputs)
        except InvalidRequestError as exc:  # the engine checks a "prompt"; on this route the field is `input`
            if exc.param == "prompt":
                exc.param = "input"
            raise
        data = [
            p.EmbeddingData(index=i, embedding=_b64(v) if req.encoding_format == "base64" else v)
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(x) for x in inputs)
        return p.EmbeddingList(data=data, model=self.model_id,
                               usage=p.Usage(prompt_tokens=tokens, total_tokens=tokens)).model_dump_json()


# ---------------------------------------------------------------------------- helpers
@dataclass
class _Primed:
    """A generation whose first chunk has been read (so errors show before the response starts)."""

    first: GenerationChunk | None
    rest: AsyncIterator[GenerationChunk]
    prompt_tokens: int
    meter: LLMMeter | None = None


async def _close(chunks: AsyncIterator[GenerationChunk]) -> None:
    """Close a generation if it can be closed (async generators can; a bare iterator has nothing to close)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


async def _open(requests: Sequence[tuple[list[int], SamplingParams]], engine: LLMEngine,
                meter: LLMMeter | None = None) -> list[_Primed]:
    """Start every generation and read its first chunk; on any error close them all and raise."""
    opened: list[_Primed] = []
    try:
        for ids, params in requests:
            gen = engine.generate(ids, params)
            opened.append(_Primed(None, gen, len(ids), meter))
            opened[-1].first = await anext(gen, None)
    except BaseException:
        for primed in opened:
            await _close(primed.rest)
        raise
    return opened


async def _stream(primed: _Primed) -> AsyncGenerator[GenerationChunk, None]:
    """The generation's chunks, the primed first one included; counts its tokens on the meter as they pass."""
    seen, chunk = 0, primed.first
    while chunk is not None:  # the first chunk is None only when the generation is already over
        if primed.meter is not None:
            primed.meter.generated(chunk.num_generated_tokens - seen)
        seen = chunk.num_generated_tokens
        yield chunk
        chunk = await anext(primed.rest, None)


async def _merge(streams: list[_Primed]) -> AsyncGenerator[tuple[int, GenerationChunk], None]:
    """Chunks of several generations as they come, tagged with their index; closing stops them all."""
    if len(streams) == 1:
        try:
            async with contextlib.aclosing(_stream(streams[0])) as chunks:
                async for chunk in chunks:
                    yield 0, chunk
        finally:
            await _close(streams[0].rest)
        return
    queue: asyncio.Queue[tuple[int, GenerationChunk | BaseException | None]] = asyncio.Queue()

    async def pump(i: int, primed: _Primed) -> None:
        try:
            async for chunk in _stream(primed):
                await queue.put((i, chunk))
            await queue.put((i, None))
        except Exception as exc:
            await queue.put((i, exc))
        finally:
            await _close(primed.rest)

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, item = await queue.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield i, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _collect(streams: list[_Primed]) -> list[tuple[str, str | None, int, list[TokenLogprob]]]:
    """(text, finish_reason, generated tokens, token logprobs if asked) of each generation, run together."""
    async def one(primed: _Primed) -> tuple[str, str | None, int, list[TokenLogprob]]:
        text, reason, count = [], None, 0
        logprobs: list[TokenLogprob] = []
        try:
            async for chunk in _stream(primed):
                text.append(chunk.text)
                logprobs.extend(chunk.logprobs)
                reason, count = chunk.finish_reason or reason, chunk.num_generated_tokens
        finally:
            await _close(primed.rest)
        return "".join(text), reason, count, logprobs

    return list(await asyncio.gather(*(one(s) for s in streams)))


def _sampling(req: p.ChatCompletionRequest | p.CompletionRequest, max_tokens: int | None,
              logprobs: int | None, structured: StructuredOutput | None = None) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        stop=tuple(req.stop_list()), seed=req.seed, top_k=req.top_k_value(), logprobs=logprobs,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty_value(), logit_bias=req.logit_bias_pairs(),
        structured=structured, **req.vllm_extras(max_tokens),
    )


def _chat_logprobs(entries: Sequence[TokenLogprob]) -> p.ChoiceLogprobs:
    """OpenAI's chat ``logprobs``: each token with its bytes (UTF-8 of its text) and its alternatives."""
    return p.ChoiceLogprobs(content=[
        p.ChatTokenLogprob(token=e.token, logprob=_generated(e.logprob), bytes=list(e.token.encode()), top_logprobs=[
            p.TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in e.top
        ]) for e in entries
    ])


def _legacy_logprobs(entries: Sequence[TokenLogprob], offset: int) -> p.CompletionLogprobs:
    """OpenAI's legacy completion ``logprobs``; ``offset``: where the first token starts in the choice's text.
    Each ``top_logprobs`` dict also holds the sampled token, as OpenAI's and vLLM's do (up to k+1 entries)."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return p.CompletionLogprobs(
        tokens=[e.token for e in entries], token_logprobs=[e.logprob for e in entries],
        top_logprobs=[None if e.logprob is None else {**dict(e.top), e.token: e.logprob} for e in entries],
        text_offset=offsets,
    )


def _echoed_only(echoes: list[tuple[str, list[TokenLogprob]]], model: str, prompt_tokens: int,
                 req: p.CompletionRequest) -> str:
    """The answer to ``echo`` with ``max_tokens=0``: each prompt, nothing generated."""
    choices = [p.CompletionChoice(index=i, text=head, finish_reason="length",
                                  logprobs=_legacy_logprobs(before, 0) if req.logprobs is not None else None)
               for i, (head, before) in enumerate(echoes)]
    body = p.Completion(id=p.new_id("cmpl"), created=p.now(), model=model, choices=choices,
                        usage=_usage(prompt_tokens, 0))
    return body.model_dump_json()


def _generated(logprob: float | None) -> float:
    assert logprob is not None, "only a prompt's first token has no log probability"
    return logprob


def _prompt_list(value: str | list[str] | list[int] | list[list[int]], param: str) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if not value:
        raise InvalidRequestError(f"{param} is an empty list: send a string, a list of strings or token ids",
                                  param=param)
    if all(isinstance(x, int) for x in value):
        return [[x for x in value if isinstance(x, int)]]
    return [x for x in value if isinstance(x, (str, list))]


def _usage(prompt_tokens: int, completion_tokens: int) -> p.Usage:
    return p.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)


def _b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _as_request_error(exc: Exception) -> LLMRequestError:
    if isinstance(exc, LLMRequestError):
        return exc
    logger.exception("LLM request failed")
    return EngineError(f"the server failed to answer: {type(exc).__name__}: {exc}")

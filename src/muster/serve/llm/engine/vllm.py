"""The vLLM engine (``pip install "muster[vllm]"``): vLLM's own async engine, ``engine_kwargs`` passed through.

vLLM does continuous batching with a paged KV cache itself; this adapter only
maps :class:`SamplingParams` and its outputs onto the engine seam. Stop
strings, seeds and temperature 0 (greedy) are vLLM's. Embeddings need a
pooling model and are not offered through this engine.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from muster.core import context, settings
from muster.serve.llm.config import TOOL_KWARGS, LLMConfig
from muster.serve.llm.engine.base import (
    EngineStats,
    GenerationChunk,
    LLMEngine,
    SamplingParams,
    StructuredOutput,
    TokenLogprob,
)
from muster.serve.llm.errors import EngineError, InvalidRequestError, LLMConfigError

_RECENT = 256


class VLLMEngine(LLMEngine):
    """vLLM's ``AsyncLLM`` behind the engine seam."""

    def __init__(self, config: LLMConfig):
        super().__init__(config)
        self.engine: Any = None
        self.tokenizer: Any = None
        self._running: set[str] = set()
        self._finished = 0
        self._generated = 0
        self._ttft: deque[float] = deque(maxlen=_RECENT)
        self._token_times: deque[tuple[float, int]] = deque(maxlen=_RECENT)

    def start(self) -> None:
        try:
            from transformers import AutoTokenizer
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise LLMConfigError(
                f"model {self.config.model_id!r} uses the vLLM engine, which could not be imported ({exc}): "
                "pip install \"muster[vllm]\"."
            ) from exc
        kwargs = {k: v for k, v in self.config.engine_kwargs.items() if k not in TOOL_KWARGS}  # (the server's)
        kwargs.setdefault("served_model_name", self.config.model_id)
        kwargs.setdefault("tokenizer", self.config.tokenizer_source)
        args = AsyncEngineArgs(model=self.config.model_source, **kwargs)
        _own_scheduling_group(_group_nice())
        self.engine = AsyncLLM.from_engine_args(args)
        self.tokenizer = AutoTokenizer.from_pretrained(
            kwargs["tokenizer"], trust_remote_code=bool(kwargs.get("trust_remote_code", False)))
        self.max_model_len = int(self.engine.model_config.max_model_len)

    def encode_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(
                f"model {self.config.model_id!r} has no chat template; use /v1/completions or save one with "
                "the tokenizer.", param="messages", code="no_chat_template",
            )
        rendered = self.tokenizer.apply_chat_template(list(messages), tools=tools, add_generation_prompt=True,
                                                      tokenize=False)
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[GenerationChunk]:
        from vllm import SamplingParams as VSamplingParams
        from vllm import TokensPrompt

        max_tokens = self.check_prompt(prompt_ids, params.max_tokens, len(self.tokenizer), params)
        request_id = uuid.uuid4().hex
        sampling = VSamplingParams(max_tokens=max_tokens, temperature=params.temperature, top_p=params.top_p,
                                   stop=list(params.stop) or None, seed=params.seed, top_k=params.top_k,
                                   logprobs=params.logprobs, presence_penalty=params.presence_penalty,
                                   frequency_penalty=params.frequency_penalty,
                                   repetition_penalty=params.repetition_penalty,
                                   logit_bias=dict(params.logit_bias) or None, min_p=params.min_p,
                                   min_tokens=params.min_tokens, ignore_eos=params.ignore_eos,
                                   allowed_token_ids=list(params.allowed_token_ids) or None,
                                   stop_token_ids=list(params.stop_token_ids) or None,
                                   **_structured_kwargs(params.structured))
        self._running.add(request_id)
        sent_text, sent_tokens, finished, started = 0, 0, False, time.perf_counter()
        try:
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt_ids), sampling, request_id):
                completion = out.outputs[0]
                tokens = len(completion.token_ids)
                if tokens and sent_tokens == 0:
                    self._ttft.append(time.perf_counter() - started)
                self._generated += tokens - sent_tokens
                self._token_times.append((time.perf_counter(), tokens - sent_tokens))
                finished = bool(out.finished)
                text = completion.text[sent_text:]
                logprobs = () if params.logprobs is None else _logprobs(completion, sent_tokens, params.logprobs)
                sent_text, sent_tokens = len(completion.text), tokens
                reason = completion.finish_reason if finished else None
                if text or reason or logprobs:
                    yield GenerationChunk(text=text, num_prompt_tokens=len(prompt_ids),
                                          num_generated_tokens=tokens, finish_reason=reason, logprobs=logprobs)
        except InvalidRequestError:
            raise
        except Exception as exc:  # (a closed stream raises GeneratorExit, which is not an Exception)
            raise EngineError(f"vLLM failed for model {self.config.model_id!r}: {exc}") from exc
        finally:
            self._running.discard(request_id)
            self._finished += 1
            if not finished:
                await self.engine.abort(request_id)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        raise InvalidRequestError(
            f"model {self.config.model_id!r} runs on vLLM for generation; embeddings are served by the "
            "transformers engine (llm_engine='transformers').", param="model",
        )

    def stats(self) -> EngineStats:
        window = list(self._token_times)
        rate = 0.0
        if len(window) > 1 and window[-1][0] > window[0][0]:
            rate = sum(n for _, n in window[1:]) / (window[-1][0] - window[0][0])
        return EngineStats(steps=0, running=len(self._running), waiting=0, requests_finished=self._finished,
                           generated_tokens=self._generated, ttft_s=tuple(self._ttft), tokens_per_s=rate)

    def check_health(self) -> None:
        if self.engine is None or getattr(self.engine, "errored", False):
            raise EngineError(f"the vLLM engine of model {self.config.model_id!r} is not running")

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None


def _group_nice() -> int:
    raw = settings.vllm_group_nice()
    try:
        nice = int(raw)
    except ValueError:
        nice = -1
    if not 0 <= nice <= 19:
        raise LLMConfigError(f"MUSTER_VLLM_NICE={raw!r}: use an integer from 0 (off) to 19 (the lowest weight).")
    return nice


def _own_scheduling_group(nice: int) -> None:
    """Put this replica, and the engine processes vLLM is about to start from it, in a scheduling
    group of their own at ``nice`` (0: leave them where they are); only in a local engine's worker.

    vLLM's engine core and worker busy-poll while they serve (on 2 cores: ~170% CPU). With the
    kernel's autogroup scheduling on, CPU is shared between sessions first, so a process's own
    nice does not reach across them, and the Serve ingress and clients waited tens of ms behind
    the pollers (docs/serve-llm.md). A new session is a new autogroup; its nice lowers the whole
    group's weight, which only matters while cores are short. Without autogroup: nothing to do.
    """
    if nice == 0 or context.worker_engine() != "local":  # not a driver's process, nor a Ray worker (Ray's)
        return
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            if f.read().strip() != "1":
                return
        os.setsid()
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:  # not Linux, already a session leader, or not allowed: keep the default
        pass


def _logprobs(completion: Any, start: int, top: int) -> tuple[TokenLogprob, ...]:
    """vLLM's logprobs of tokens ``start..`` (per token: token id -> ``Logprob(logprob, rank, decoded_token)``,
    holding the ``top`` best ranked and the sampled token) as :class:`TokenLogprob`."""
    out = []
    for token_id, found in zip(completion.token_ids[start:], (completion.logprobs or [])[start:]):
        best = sorted((x for x in found.values() if x.rank is not None and x.rank <= top), key=lambda x: x.rank)
        chosen = found[token_id]
        out.append(TokenLogprob(token=chosen.decoded_token or "", logprob=chosen.logprob,
                                top=tuple((x.decoded_token or "", x.logprob) for x in best)))
    return tuple(out)


def _structured_kwargs(structured: StructuredOutput | None) -> dict[str, Any]:
    """vLLM's SamplingParams argument for ``structured``: ``structured_outputs`` (vLLM >= 0.10.2), else the
    older ``guided_decoding``."""
    if structured is None:
        return {}
    fields: dict[str, Any] = (
        {"json": json.loads(structured.spec)} if structured.kind == "json"
        else {"regex": structured.spec} if structured.kind == "regex" else {"choice": list(structured.choices)}
    )
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(**fields)}
    return {"structured_outputs": StructuredOutputsParams(**fields)}

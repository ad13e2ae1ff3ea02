"""The default engine: a Hugging Face transformers model with continuous batching.

It drives transformers' own ``ContinuousBatchingManager`` (a paged KV cache,
one slot per sequence; a background thread runs one forward pass per step over
every running sequence, and requests join and leave between steps). This
module adds what a server needs around it: admission with a bounded queue,
per-request temperature/top_p, top_k, penalties, logit bias, structured output and log probabilities
(``_hf_logprobs``, ``structured``),
stop strings, incremental text, abort on disconnect, restart after a fatal
engine error, and counters.

Greedy requests (temperature 0) run in the same sampling batch at
``GREEDY_TEMPERATURE``, which makes sampling an argmax. The manager has one
random generator, so a request's ``seed`` does not make sampled output
reproducible here (OpenAI calls seed best-effort too).
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from muster.serve.llm.config import LLMConfig
from muster.serve.llm.engine.base import (
    GREEDY_TEMPERATURE,
    EngineStats,
    GenerationChunk,
    LLMEngine,
    SamplingParams,
    TextAssembler,
    TokenLogprob,
)
from muster.serve.llm.engine._hf_logprobs import LogprobTap, RawLogprob, Shaping
from muster.serve.llm.engine.structured import Grammars
from muster.serve.llm.errors import EngineError, EngineOverloadedError, InvalidRequestError, LLMConfigError

DEFAULT_MAX_NUM_SEQS = 64
DEFAULT_MAX_WAITING = 256
DEFAULT_PAGE_SIZE = 64
_RECENT = 256  # requests kept for time-to-first-token and tokens/s figures
# The decoding loop is a Python thread beside the serving event loop; with CPython's default
# 5 ms GIL switch interval, each token waits for the loop to get the GIL.  At 0.5 ms, measured
# with llm_bench.py (tiny model, CPU): added time to first token 5.5-6.2 -> 4.5-4.9 ms, tokens/s
# +50% at concurrency 1 and +13% at 32.
_SWITCH_INTERVAL_S = 0.0005
_TEXT_CONTEXT = 6  # tokens decoded before one token to find the text it adds (spaces, merged characters)
_PROBE = "Hello, world! 12 h\u00e9llo\n  x<|y|> \u4f60\u597d"  # text on which the fast tokenizer paths must agree


#: The oldest transformers this engine runs on: the continuous-batching manager it drives changed
#: its arguments (page_size, 5.18) and how the model answers a plain forward after it (5.19).
MIN_TRANSFORMERS = (5, 19)


def _check_transformers(model_id: str) -> None:
    import transformers

    found = transformers.__version__
    release = tuple(int(p) for p in found.split("+")[0].split(".")[:2] if p.isdigit())
    if release < MIN_TRANSFORMERS:
        need = ".".join(map(str, MIN_TRANSFORMERS))
        raise LLMConfigError(
            f"model {model_id!r}: muster's transformers engine needs transformers >= {need}, and {found} is "
            f"installed (its continuous batching takes other arguments). Fix: pip install -U 'transformers>={need}' "
            "(muster[llm] asks for it), or llm_engine='vllm' where vLLM is installed."
        )


class TransformersEngine(LLMEngine):
    """Continuous batching over a transformers causal LM (CPU or GPU)."""

    def __init__(self, config: LLMConfig):
        super().__init__(config)
        kw = config.engine_kwargs
        self.max_num_seqs = int(kw.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS))
        self.max_waiting = int(kw.get("max_waiting_requests", DEFAULT_MAX_WAITING))
        self.tokenizer: Any = None
        self.model: Any = None
        self._vocab_size = 0
        self._ids_of: Callable[[str, bool], list[int]] = lambda text, special: []
        self._text_of: Callable[[list[int]], str] = lambda ids: ""
        self._manager: Any = None
        self._lock = threading.Lock()
        self._in_flight: dict[str, bool] = {}  # request id -> has produced a token
        self._finished = 0
        self._generated = 0
        self._steps_before_restart = 0
        self._ttft: deque[float] = deque(maxlen=_RECENT)
        self._token_times: deque[tuple[float, int]] = deque(maxlen=_RECENT)
        self._tap = LogprobTap(config.model_id)
        self._grammars: Grammars | None = None  # structured output's matchers, once the model is loaded

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        _check_transformers(self.config.model_id)
        self._load()
        if sys.getswitchinterval() > _SWITCH_INTERVAL_S:
            sys.setswitchinterval(_SWITCH_INTERVAL_S)
        self._start_manager()

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = self.config.engine_kwargs
        gpus = self.config.num_gpus()
        seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus > seen:
            raise LLMConfigError(
                f"model {self.config.model_id!r} asks for {gpus} GPU(s) per replica (tensor_parallel_size x "
                f"pipeline_parallel_size, or accelerator_type={self.config.accelerator_type!r}), but this replica "
                f"sees {seen}. Run it on a node with {gpus} GPU(s), or drop accelerator_type and set "
                "tensor_parallel_size=1 to serve on CPU."
            )
        device = kw.get("device", "auto")
        if device == "auto":
            device = "cuda" if gpus or seen else "cpu"
        trust = bool(kw.get("trust_remote_code", False))
        source = self.config.model_source
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.config.tokenizer_source, trust_remote_code=trust)
            placement: dict[str, Any] = {"device_map": "auto"} if gpus > 1 else {}
            self.model = AutoModelForCausalLM.from_pretrained(
                source, dtype=kw.get("dtype", "auto"), attn_implementation="sdpa", trust_remote_code=trust, **placement
            )
        except OSError as exc:
            raise LLMConfigError(
                f"could not load model_source={source!r} (tokenizer: {self.config.tokenizer_source!r}) for model "
                f"{self.config.model_id!r}: {exc}. Give a local "
                "directory holding config.json, the weights and the tokenizer, or a Hugging Face repository id "
                "this machine can download."
            ) from exc
        if gpus <= 1:
            self.model.to(device)
        self.model.eval()
        limit = getattr(self.model.config.get_text_config(), "max_position_embeddings", None) or 2048
        self.max_model_len = int(kw.get("max_model_len", limit))
        self._vocab_size = int(self.model.config.get_text_config().vocab_size)
        self._pick_tokenizer_paths()
        self._grammars = Grammars(self.tokenizer, self._vocab_size, self._eos_ids())

    def _pick_tokenizer_paths(self) -> None:
        """Encode and decode with the Rust tokenizer directly when it gives what the transformers wrapper
        gives on a probe text: the wrapper's Python layer costs ~0.2 ms a call, on every request's way to
        its first token and on every streamed chunk."""
        tok = self.tokenizer

        def slow_ids(text: str, special: bool) -> list[int]:
            return list(tok(text, add_special_tokens=special)["input_ids"])

        def slow_text(ids: list[int]) -> str:
            return str(tok.decode(ids, skip_special_tokens=True))

        self._ids_of, self._text_of = slow_ids, slow_text
        backend = getattr(tok, "backend_tokenizer", None) if getattr(tok, "is_fast", False) else None
        if backend is None:
            return

        def fast_ids(text: str, special: bool) -> list[int]:
            return list(backend.encode(text, add_special_tokens=special).ids)

        def fast_text(ids: list[int]) -> str:
            return str(backend.decode(ids, skip_special_tokens=True))

        if all(fast_ids(_PROBE, sp) == slow_ids(_PROBE, sp) for sp in (True, False)):
            self._ids_of = fast_ids
        ids = slow_ids(_PROBE, True)
        if not getattr(tok, "clean_up_tokenization_spaces", False) and fast_text(ids) == slow_text(ids):
            self._text_of = fast_text

    def _eos_tuple(self) -> tuple[int, ...]:
        eos = self._eos_ids()
        return () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)

    def _eos_ids(self) -> int | list[int] | None:
        """The token(s) that end a sequence: the model's generation config's, else the tokenizer's."""
        eos = self.model.generation_config.eos_token_id
        return self.tokenizer.eos_token_id if eos is None else eos

    def _start_manager(self) -> None:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        kw = self.config.engine_kwargs
        page = int(kw.get("page_size", DEFAULT_PAGE_SIZE))
        on_cpu = self.model.device.type == "cpu"
        blocks = kw.get("num_blocks")
        if blocks is None and on_cpu:
            blocks = self.max_num_seqs * math.ceil(min(self.max_model_len, 2048) / page) + 1
        eos = self._eos_ids()
        generation = GenerationConfig(
            # Temperature and top_p are set per request; these non-default values make the
            # manager build the per-request warpers at all. (top_k: see _hf_logprobs.)
            do_sample=True, temperature=0.5, top_p=0.99, max_new_tokens=16,
            eos_token_id=eos if eos is not None else -1,
        )
        cb = ContinuousBatchingConfig(
            page_size=page, num_blocks=blocks, max_requests_per_batch=self.max_num_seqs,
            max_memory_percent=None if on_cpu else self._gpu_memory_share(),
            max_batch_tokens=max(page, min(self.max_model_len, 1024)) if on_cpu else None,
            per_request_processors=True, seed=int(kw.get("seed", 0)), allow_block_sharing=False,
        )
        self._manager = self.model.init_continuous_batching(generation_config=generation, continuous_batching_config=cb)
        self._tap.install(self._manager)
        self._manager.start()

    def _gpu_memory_share(self) -> float | None:
        """The fraction of the GPU's memory the KV cache may take: ``gpu_memory_utilization``, else 0.9 x the
        replica's part of a GPU it shares (transformers would size it from the whole device, so the second
        replica on the GPU would find it full), else None (transformers' default)."""
        share = self.config.engine_kwargs.get("gpu_memory_utilization")
        if share is not None:
            return float(share)
        gpus = float((self.config.deployment_config.get("ray_actor_options") or {}).get("num_gpus", 0) or 0)
        return 0.9 * gpus if 0 < gpus < 1 else None

    def check_health(self) -> None:
        manager = self._manager
        if manager is None:
            raise EngineError(f"the engine of model {self.config.model_id!r} is not started")
        fatal = manager.background_thread_status.fatal_error
        if fatal is not None or not manager.is_running():
            raise EngineError(f"the decoding loop of model {self.config.model_id!r} stopped: {fatal!r}")

    def shutdown(self) -> None:
        manager, self._manager = self._manager, None
        if manager is not None:
            manager.stop(block=True, timeout=10, hard_stop=True)
            manager.destroy()

    # ------------------------------------------------------------------ requests
    def encode_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(
                f"model {self.config.model_id!r} has no chat template, so /v1/chat/completions cannot render "
                "messages. Use /v1/completions with a plain prompt, or save a chat template with the tokenizer "
                "(tokenizer.chat_template = ...; tokenizer.save_pretrained(model_source)).",
                param="messages", code="no_chat_template",
            )
        rendered = self.tokenizer.apply_chat_template(list(messages), tools=tools, add_generation_prompt=True,
                                                      tokenize=False)
        return self._ids_of(rendered, False)

    def encode(self, text: str) -> list[int]:
        return self._ids_of(text, True)

    def decode(self, ids: list[int]) -> str:
        return self._text_of(list(ids))

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[GenerationChunk]:
        max_tokens = self.check_prompt(prompt_ids, params.max_tokens, self.vocab_size, params)
        request_id, outputs = await self._submit(prompt_ids, params, max_tokens)
        assembler = TextAssembler(self._text_of, params.stop)
        seen, finished, done_there, started = 0, False, False, time.perf_counter()
        ids: list[int] = []  # generated so far, for the text of each token's log probability
        try:
            while not finished:
                out = await outputs.get()
                while not outputs.empty():  # fell behind: outputs are cumulative, so the latest one covers all
                    out = outputs.get_nowait()
                if out.status == _failed():
                    raise EngineError(f"generation failed in the engine of model {self.config.model_id!r}: {out.error}")
                new = list(out.generated_tokens[seen:])
                cut = next((k for k, t in enumerate(new) if t in params.stop_token_ids), None)
                if cut is not None:  # vLLM's stop_token_ids: the token ends the sequence (and is kept)
                    new = new[:cut + 1]
                if new and seen == 0:
                    self._ttft.append(time.perf_counter() - started)
                logprobs: tuple[TokenLogprob, ...] = ()
                if params.logprobs is not None:
                    logprobs = self._token_logprobs(ids, self._tap.take(request_id, seen, seen + len(new)))
                ids.extend(new)
                seen += len(new)
                self._generated += len(new)
                self._token_times.append((time.perf_counter(), len(new)))
                done_there = out.is_finished()
                finished = done_there or cut is not None  # (one cut here is cancelled in the engine)
                text = assembler.push(new, final=finished)
                reason = None
                if assembler.stopped:
                    reason, finished = "stop", True
                elif finished:
                    reason = "length" if seen >= max_tokens and cut is None else "stop"
                if text or reason or logprobs:
                    yield GenerationChunk(text=text, num_prompt_tokens=len(prompt_ids),
                                          num_generated_tokens=seen, finish_reason=reason, logprobs=logprobs)
        finally:  # a request ended here (a stop string, a closed stream) is cancelled in the engine too
            self._release(request_id, cancel=not done_there)

    def _token_logprobs(self, before: list[int], raws: list[RawLogprob]) -> tuple[TokenLogprob, ...]:
        """``raws`` (of the tokens generated after ``before``) with each token's text."""
        out: list[TokenLogprob] = []
        before = list(before)
        for token, logprob, top_ids, top_values in raws:
            out.append(TokenLogprob(token=self._token_text(before, token), logprob=logprob,
                                    top=tuple((self._token_text(before, t), v) for t, v in zip(top_ids, top_values))))
            before.append(token)
        return tuple(out)

    def _token_text(self, before: list[int], token: int) -> str:
        """The text ``token`` adds after ``before`` (special tokens add none)."""
        context = before[-_TEXT_CONTEXT:]
        return self._text_of([*context, token])[len(self._text_of(context)):]

    async def _submit(self, prompt_ids: list[int], params: SamplingParams,
                      max_tokens: int) -> tuple[str, asyncio.Queue]:
        with self._lock:
            if len(self._in_flight) >= self.max_num_seqs + self.max_waiting:
                raise EngineOverloadedError(
                    f"model {self.config.model_id!r} is overloaded: {len(self._in_flight)} requests are running or "
                    f"waiting (max_num_seqs={self.max_num_seqs} + max_waiting_requests={self.max_waiting}). "
                    "Retry later, add replicas, or raise engine_kwargs['max_waiting_requests'].",
                    code="overloaded",
                )
            request_id = uuid.uuid4().hex
            self._in_flight[request_id] = False
        outputs: asyncio.Queue = asyncio.Queue()
        temperature = GREEDY_TEMPERATURE if params.temperature <= 0 else params.temperature
        if params.logprobs is not None or params.shapes_logits:
            shaping = Shaping(
                top_k=params.top_k, presence_penalty=params.presence_penalty,
                frequency_penalty=params.frequency_penalty, repetition_penalty=params.repetition_penalty,
                logit_bias=params.logit_bias,
                prompt=tuple(prompt_ids) if params.repetition_penalty != 1.0 else (),
                allowed=params.allowed_token_ids, min_tokens=params.min_tokens, ignore_eos=params.ignore_eos,
                eos=self._eos_tuple() if params.min_tokens or params.ignore_eos else (),
                stops=params.stop_token_ids if params.min_tokens else (),
                min_p=params.min_p, temperature=max(params.temperature, GREEDY_TEMPERATURE),
            )
            try:
                matcher = None
                if params.structured is not None:
                    assert self._grammars is not None, "the model is loaded before requests come"
                    # (off the event loop: the first one reads the vocabulary, ~1 s for a large one)
                    matcher = await asyncio.to_thread(self._grammars.matcher, params.structured, "response_format")
                self._tap.want(request_id, params.logprobs, None if shaping == Shaping() else shaping, matcher)
            except InvalidRequestError:
                self._release(request_id, cancel=False)
                raise
        for attempt in range(2):
            self.check_health_for_request()
            self._manager.register_result_handler(request_id, outputs.put_nowait)
            accepted = self._manager.add_request(
                list(prompt_ids), request_id=request_id, max_new_tokens=max_tokens, streaming=True,
                temperature=temperature, top_p=params.top_p,
            )
            if accepted is not None:
                return request_id, outputs
            # Refused: the loop is stopping after a fatal error it has not recorded yet. Wait for the
            # thread to end (bounded), then the next attempt restarts it.
            for _ in range(1000):
                if not self._manager.is_running():
                    break
                await asyncio.sleep(0.01)
        self._release(request_id, cancel=False)
        raise EngineError(f"the engine of model {self.config.model_id!r} refused the request (its decoding loop "
                          "is stopping and did not restart)")

    def check_health_for_request(self) -> None:
        """Before a request: restart the decoding loop if a fatal error stopped it (that error already
        failed the requests it was running)."""
        manager = self._manager
        if manager is not None and (manager.background_thread_status.fatal_error is not None
                                    or not manager.is_running()):
            self._steps_before_restart += getattr(manager, "current_batch", 0)
            manager.stop(block=True, timeout=10, hard_stop=True)
            manager.destroy()
            self._manager = None
            self._start_manager()
        self.check_health()

    def _release(self, request_id: str, cancel: bool) -> None:
        self._tap.forget(request_id)
        with self._lock:
            if self._in_flight.pop(request_id, None) is None:
                return
            self._finished += 1
        manager = self._manager
        if manager is None:
            return
        if cancel:
            manager.cancel_request(request_id)
        router = manager.output_router
        with router._lock:
            router.result_handlers.pop(request_id, None)

    # ------------------------------------------------------------------ embeddings and stats
    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        for ids in inputs:
            self.check_prompt(ids, None, self.vocab_size)
        return await asyncio.to_thread(self._embed, inputs)

    def _embed(self, inputs: list[list[int]]) -> list[list[float]]:
        import torch

        vectors = []
        with torch.no_grad():
            for ids in inputs:  # one at a time: no padding, so no attention-mask subtleties
                out = self.model(torch.tensor([ids], device=self.model.device), output_hidden_states=True)
                vectors.append(out.hidden_states[-1][0].float().mean(dim=0).tolist())
        return vectors

    async def prompt_logprobs(self, prompt_ids: list[int], top: int) -> list[TokenLogprob]:
        self.check_prompt(prompt_ids, None, self.vocab_size)
        return await asyncio.to_thread(self._prompt_logprobs, prompt_ids, top)

    def _prompt_logprobs(self, ids: list[int], top: int) -> list[TokenLogprob]:
        """One forward pass over the prompt (as the embeddings take one): the log-softmax at each place."""
        import torch

        with torch.no_grad():
            logits = self.model(torch.tensor([ids], device=self.model.device)).logits[0, :-1].float()
        rows = torch.log_softmax(logits, dim=-1)
        out = [TokenLogprob(token=self._text_of(ids[:1]), logprob=None)]
        for i, token in enumerate(ids[1:]):
            values, alternatives = rows[i].topk(top) if top else (rows[i][:0], rows[i][:0].long())
            before = ids[:i + 1]
            out.append(TokenLogprob(token=self._token_text(before, token), logprob=float(rows[i, token]),
                                    top=tuple((self._token_text(before, int(t)), float(v))
                                              for t, v in zip(alternatives.tolist(), values.tolist()))))
        return out

    def stats(self) -> EngineStats:
        manager = self._manager
        steps = self._steps_before_restart + (getattr(manager, "current_batch", 0) if manager is not None else 0)
        running = waiting = 0
        processor = getattr(manager, "batch_processor", None)
        scheduler = getattr(processor, "scheduler", None)
        if scheduler is not None:
            running = len(scheduler.active_requests)
            waiting = len(scheduler.waiting_requests)
        with self._lock:
            in_flight = len(self._in_flight)
        waiting = max(waiting, in_flight - running)
        window = list(self._token_times)
        rate = 0.0
        if len(window) > 1 and window[-1][0] > window[0][0]:
            rate = sum(n for _, n in window[1:]) / (window[-1][0] - window[0][0])
        return EngineStats(steps=steps, running=running, waiting=waiting, requests_finished=self._finished,
                           generated_tokens=self._generated, ttft_s=tuple(self._ttft), tokens_per_s=rate)


def _failed() -> Any:
    from transformers.generation.continuous_batching.requests import RequestStatus

    return RequestStatus.FAILED

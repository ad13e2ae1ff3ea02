"""Log probabilities, top_k, penalties, logit bias and structured output for transformers' continuous-batching
loop, for the requests that ask for them.

transformers' manager samples each step's tokens from processed scores and can hand back only the
chosen token's probability after temperature. OpenAI's ``top_logprobs`` needs the distribution itself, so
:class:`LogprobTap` sits at two points of the loop's own objects (no copy of its code):

* the model runner's logits-processor list, called once per forward pass with the raw float32 logits of
  the rows that get a new token (in the batch's order): the tap keeps their log-softmax when a request in
  flight wants logprobs, then shapes the rows of the requests that asked, in vLLM's order, before
  temperature and top_p: tokens outside a structured output's grammar masked (:mod:`.structured`),
  OpenAI's ``logit_bias`` added, vLLM's ``repetition_penalty`` (over the prompt and
  the output) and OpenAI's ``presence_penalty`` and ``frequency_penalty`` (over the output) applied, and
  all but the ``top_k`` largest logits masked. transformers' own per-request top-k warper would sort every
  row of every step, ~12 ms a row for a 152k vocabulary on a CPU core, asked or not;
* the batch processor's ``update_batch``, which hands each request its new token: just before it runs, the
  tap pairs the kept rows with the requests of that batch and stores, for those that asked, the chosen
  token's log probability and the ``k`` most likely tokens.

Both run on the decoding thread, one forward then its update, so the kept rows always belong to the batch
being updated. The log probabilities are the raw model's (vLLM's default ``logprobs_mode="raw_logprobs"``):
before temperature, top_k and top_p. When transformers captures CUDA graphs, compiles the step, or overlaps
steps (async batching), the hooks would not see each step, and the tap refuses such requests instead (the
transformers engine uses SDPA attention, which needs an attention mask, so transformers chooses none of them).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from muster.serve.llm.engine.structured import allowed
from muster.serve.llm.errors import InvalidRequestError

_NO_HOOKS = ("this transformers version's continuous-batching loop has none of the hooks muster reads log "
             "probabilities at (transformers 5.24 has them)")
# (token id, its log probability, ids of the k most likely tokens, their log probabilities)
RawLogprob = tuple[int, float, list[int], list[float]]


@dataclass(frozen=True)
class Shaping:
    """How one request's logits are changed before temperature and top_p (see :class:`SamplingParams`)."""

    top_k: int = -1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    prompt: tuple[int, ...] = ()  # (only read by repetition_penalty)
    allowed: tuple[int, ...] = ()  # vLLM's allowed_token_ids (empty: all)
    eos: tuple[int, ...] = ()  # the end-of-sequence ids, masked while ``len(generated) < min_tokens`` or ignore_eos
    stops: tuple[int, ...] = ()  # stop_token_ids, masked while ``len(generated) < min_tokens`` (as vLLM's)
    min_tokens: int = 0
    ignore_eos: bool = False
    min_p: float = 0.0
    temperature: float = 1.0  # (only read by min_p, which is relative to the tempered distribution)

    def apply(self, row: Any, generated: Sequence[int]) -> None:
        """Shape ``row``, one request's logits, in place; ``generated``: its tokens so far."""
        import math

        import torch

        if self.allowed:
            keep = torch.full_like(row, float("-inf"))
            keep[list(self.allowed)] = 0.0
            row += keep
        if self.eos and (self.ignore_eos or len(generated) < self.min_tokens):
            row[list(self.eos)] = float("-inf")
        if self.stops and len(generated) < self.min_tokens:
            row[list(self.stops)] = float("-inf")
        if self.logit_bias:
            ids, bias = zip(*self.logit_bias)
            row[list(ids)] += torch.tensor(bias, dtype=row.dtype)
        if self.repetition_penalty != 1.0 and (self.prompt or generated):
            seen = torch.tensor(sorted({*self.prompt, *generated}))
            logits = row[seen]
            row[seen] = torch.where(logits > 0, logits / self.repetition_penalty, logits * self.repetition_penalty)
        if (self.presence_penalty or self.frequency_penalty) and generated:
            ids, counts = torch.unique(torch.tensor(list(generated)), return_counts=True)
            row[ids] -= self.frequency_penalty * counts.to(row.dtype) + self.presence_penalty
        if 0 < self.top_k < row.shape[-1]:
            kth = row.topk(self.top_k).values[-1]
            row.masked_fill_(row < kth, float("-inf"))
        if self.min_p > 0.0:  # p / p_max >= min_p after temperature T: logit >= max + T * ln(min_p)
            row.masked_fill_(row < row.max() + self.temperature * math.log(self.min_p), float("-inf"))


def _generated(state: Any) -> list[int]:
    """The tokens a request generated so far. A request transformers put back in its queue (to free cache)
    starts again with them appended to its prompt, past ``_true_initial_tokens``."""
    true_start = getattr(state, "_true_initial_tokens", 0)  # (private in transformers 5.24: read with care)
    earlier = getattr(state, "initial_tokens", [])[true_start:] if true_start else []
    return [*earlier, *getattr(state, "generated_tokens", [])]


class LogprobTap:
    """Collects per-token log probabilities, and shapes logits (:class:`Shaping`), for the requests registered
    with :meth:`want`."""

    def __init__(self, model_id: str):
        self._model_id = model_id
        self._lock = threading.Lock()
        self._wanted: dict[str, int] = {}  # request id -> how many alternatives (top_logprobs)
        self._found: dict[str, list[RawLogprob]] = {}
        self._shaping: dict[str, Shaping] = {}  # request id -> how its logits change (only requests that ask)
        self._matchers: dict[str, Any] = {}  # request id -> its structured output's grammar matcher
        self._processor: Any = None
        self._rows: deque[Any] = deque(maxlen=4)  # log-softmax of the last forward pass (None: nobody asked)
        self.unsupported: str | None = None  # why this loop cannot give logprobs

    def install(self, manager: Any) -> None:
        """Hook the batch processor ``manager`` creates on its thread (before ``manager.start()``). A
        transformers whose loop lacks the hooks still serves; only requests for logprobs or top_k are refused."""
        create: Callable[[], Any] | None = getattr(manager, "_create_batch_processor", None)
        if create is None:
            self.unsupported = _NO_HOOKS
            return

        def create_and_tap() -> Any:
            processor = create()
            try:
                self._tap(processor)
            except AttributeError:  # another transformers' loop: serve on, without logprobs and top_k
                self.unsupported = _NO_HOOKS
            return processor

        manager._create_batch_processor = create_and_tap

    def _tap(self, processor: Any) -> None:
        if getattr(processor, "_muster_tapped", False):  # the manager reuses its processor after a reset
            return
        runner = processor.model_runner
        if getattr(processor, "use_async_batching", False) or getattr(runner, "pad_inputs", False):
            self.unsupported = ("this engine runs transformers' decoding step as CUDA graphs, compiled, or with "
                                "async batching, where per-step log probabilities cannot be read")
            return
        self._processor = processor
        runner.logit_processor = _Recorder(runner.logit_processor, self)
        update: Callable[[], None] = processor.update_batch

        def read_then_update() -> None:
            self._read(processor)
            update()

        processor.update_batch = read_then_update
        processor._muster_tapped = True

    # ------------------------------------------------------------------ event loop side
    def want(self, request_id: str, logprobs: int | None, shaping: Shaping | None = None,
             matcher: Any = None) -> None:
        """From now on, record log probabilities with ``logprobs`` alternatives (None: none) for
        ``request_id``, shape its logits as ``shaping`` says (None: leave them), and keep its tokens inside
        the grammar of ``matcher`` (llguidance's, see :mod:`.structured`; None: any tokens).

        Raises:
            InvalidRequestError: this engine's decoding loop cannot be hooked.
        """
        if self.unsupported is not None:
            name = ("logprobs" if logprobs is not None else "response_format" if matcher is not None
                    else _asked(shaping or Shaping()))
            raise InvalidRequestError(
                f"{name} is not available from model {self.model_id!r}: {self.unsupported}. Leave {name} out, "
                "or use llm_engine='vllm'.", param=name,
            )
        with self._lock:
            if logprobs is not None:
                self._wanted[request_id] = logprobs
                self._found[request_id] = []
            if shaping is not None:
                self._shaping[request_id] = shaping
            if matcher is not None:
                self._matchers[request_id] = matcher

    def take(self, request_id: str, start: int, stop: int) -> list[RawLogprob]:
        """The entries of generated tokens ``start..stop-1`` of ``request_id``."""
        with self._lock:
            return self._found.get(request_id, [])[start:stop]

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._wanted.pop(request_id, None)
            self._found.pop(request_id, None)
            self._shaping.pop(request_id, None)
            self._matchers.pop(request_id, None)

    @property
    def model_id(self) -> str:
        return self._model_id

    # ------------------------------------------------------------------ decoding thread side
    def _record(self, logits: Any) -> None:
        import torch

        self._rows.append(torch.log_softmax(logits, dim=-1) if self._wanted else None)

    def _shape(self, logits: Any) -> Any:
        """``logits`` with the rows of the requests that asked shaped (:class:`Shaping`); the same tensor
        when none did."""
        if not (self._shaping or self._matchers):
            return logits
        import torch

        futures = [f for f in self._processor.inputs_and_outputs.requests_in_batch if f.has_new_token]
        with self._lock:
            ids = [f.state.request_id for f in futures[: logits.shape[0]]]
            plans = [(self._shaping.get(i), self._matchers.get(i)) for i in ids]
        shaped = logits
        for row, (future, (plan, matcher)) in enumerate(zip(futures, plans)):
            if plan is None and matcher is None:
                continue
            if shaped is logits:
                shaped = logits.clone()
            if matcher is not None:  # the grammar first: the other options choose among what it allows
                mask = torch.from_numpy(~allowed(matcher, shaped.shape[-1]))
                shaped[row, : mask.shape[0]].masked_fill_(mask, float("-inf"))
            if plan is not None:
                plan.apply(shaped[row], _generated(future.state))
        return shaped

    def _read(self, processor: Any) -> None:
        rows = self._rows.popleft() if self._rows else None
        self._rows.clear()  # (only a failed step leaves more than one: its rows are stale)
        if rows is None and not self._matchers:
            return
        requests, tokens, _ = processor.inputs_and_outputs.prepare_batch_update()
        with self._lock:
            row = 0
            for future in requests:
                if not future.has_new_token:
                    continue
                request_id = future.state.request_id
                if row < len(tokens):
                    token = int(tokens[row])
                    matcher = self._matchers.get(request_id)
                    if matcher is not None:
                        matcher.consume_token(token)
                    top = self._wanted.get(request_id)
                    if top is not None and rows is not None and row < rows.shape[0]:
                        values, ids = rows[row].topk(top) if top else (rows[row][:0], rows[row][:0].long())
                        self._found[request_id].append((token, float(rows[row, token]), ids.tolist(),
                                                        values.tolist()))
                row += 1


class _Recorder:
    """The runner's logits-processor list, recording the raw logits it is given and shaping them first."""

    def __init__(self, inner: Any, tap: LogprobTap):
        self._inner = inner
        self._tap = tap

    def __call__(self, input_ids: Any, logits: Any, args: Any) -> Any:
        self._tap._record(logits)
        return self._inner(input_ids, self._tap._shape(logits), args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _asked(shaping: Shaping) -> str:
    """The name of an option ``shaping`` holds, for an error."""
    for name, off in (("logit_bias", ()), ("presence_penalty", 0.0), ("frequency_penalty", 0.0),
                      ("repetition_penalty", 1.0), ("allowed", ()), ("min_tokens", 0), ("ignore_eos", False),
                      ("min_p", 0.0)):
        if getattr(shaping, name) != off:
            return name
    return "top_k"

"""The engine seam: what an LLM server needs from an inference engine, and the pieces engines share.

An engine owns a model and its tokenizer and runs many requests at once.
:meth:`LLMEngine.generate` returns an async iterator of
:class:`GenerationChunk`; closing it early (the client went away) aborts the
request and frees its place in the batch. Engines are used from one event
loop; their own threads (a decoding loop) hand results back to that loop.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from muster.serve.llm.config import LLMConfig
from muster.serve.llm.errors import InvalidRequestError

# Sampling at this temperature is argmax in float32: every other token's probability underflows to 0.
GREEDY_TEMPERATURE = 1e-10


@dataclass(frozen=True)
class StructuredOutput:
    """A constraint on the text a request generates (OpenAI's ``response_format``, vLLM's ``guided_*``).

    Attributes:
        kind: ``"json"`` (``spec``: a JSON schema, as JSON text; ``{"type": "object"}`` for any JSON object),
            ``"regex"`` (``spec``: the pattern the whole output matches) or ``"choice"`` (``choices``: the
            output is exactly one of them).
    """

    kind: Literal["json", "regex", "choice"]
    spec: str = ""
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to pick tokens for one sequence.

    Attributes:
        max_tokens: most tokens to generate (None: up to ``max_model_len``).
        temperature: 0 is greedy (argmax); higher is more random.
        top_p: nucleus sampling mass (1.0 keeps every token).
        stop: strings that end the completion (not included in the text).
        seed: the client's seed (engines that sample per request honour it).
        top_k: sample among the k most likely tokens only (-1 or 0: all tokens, as in vLLM).
        logprobs: None for no log probabilities; k (0..20) for each generated token's log probability
            and its k most likely alternatives (:attr:`GenerationChunk.logprobs`).
        presence_penalty: OpenAI's: subtracted from the logit of every token already generated (-2..2).
        frequency_penalty: OpenAI's: subtracted from a token's logit once per time it was generated (-2..2).
        repetition_penalty: vLLM's: the logit of a token in the prompt or the output is divided by it where
            positive and multiplied by it where negative (1: off; above 1 discourages repeats).
        logit_bias: OpenAI's, as ``(token id, bias)`` pairs: the bias (-100..100) is added to the token's logit.
        structured: what the output must be (JSON of a schema, a regex match, one of some strings), or None.
        min_p, min_tokens, ignore_eos, allowed_token_ids, stop_token_ids: vLLM's (a token below ``min_p`` times
            the likeliest one's probability is not sampled; no end of sequence before ``min_tokens`` tokens, or
            ever with ``ignore_eos``, nor a stop token before ``min_tokens``; only ``allowed_token_ids`` are
            sampled; a token of ``stop_token_ids`` ends the sequence, kept in the output).
    """

    max_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_k: int = -1
    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    structured: StructuredOutput | None = None
    min_p: float = 0.0
    min_tokens: int = 0
    ignore_eos: bool = False
    allowed_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()

    @property
    def shapes_logits(self) -> bool:
        """Whether sampling changes the model's logits for this request: top_k, min_p, a penalty, a logit bias,
        a structured output, allowed tokens, or an end of sequence held off (min_tokens, ignore_eos)."""
        return (self.top_k > 0 or self.min_p > 0 or bool(self.logit_bias) or self.structured is not None
                or self.min_tokens > 0 or self.ignore_eos or bool(self.allowed_token_ids)
                or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0)


@dataclass(frozen=True, kw_only=True)
class TokenLogprob:
    """One generated token with its log probability and the most likely alternatives at its place.

    Log probabilities are the log-softmax of the model's raw logits (before temperature, top_k and
    top_p), as vLLM's default ``logprobs_mode="raw_logprobs"`` gives them.

    Attributes:
        token: the token's text (the text it adds to the completion; "" for a special token).
        logprob: its log probability (None only for a prompt's first token, which nothing comes before).
        top: ``(text, logprob)`` of the most likely tokens, most likely first.
    """

    token: str
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, kw_only=True)
class GenerationChunk:
    """New output of one sequence since its previous chunk.

    Attributes:
        text: the text added since the previous chunk.
        num_prompt_tokens: tokens in the prompt.
        num_generated_tokens: tokens generated so far (all chunks together).
        finish_reason: ``"stop"`` (end of sequence or a stop string), ``"length"``
            (``max_tokens`` reached), or None while the sequence goes on.
        logprobs: one entry per token generated since the previous chunk when the request asked for
            ``logprobs``, else empty. Their texts together are the tokens' text, which can run past
            ``text`` where a stop string cut it or text is held back for the next chunk.
    """

    text: str
    num_prompt_tokens: int
    num_generated_tokens: int
    finish_reason: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EngineStats:
    """Counters of one engine, for metrics and for tests that prove batching.

    Attributes:
        steps: decoding steps run so far (one forward pass of the running batch each).
        running: requests generating now.
        waiting: requests accepted but not yet in the batch.
        requests_finished: requests that ended (finished, stopped, aborted or failed).
        generated_tokens: tokens generated over the engine's life.
        ttft_s: time to first token of recent requests, in seconds.
        tokens_per_s: generated tokens per second over the recent window.
    """

    steps: int
    running: int
    waiting: int
    requests_finished: int
    generated_tokens: int
    ttft_s: tuple[float, ...] = field(default_factory=tuple)
    tokens_per_s: float = 0.0


class LLMEngine(abc.ABC):
    """A model that generates for many requests at once.

    Contract: :meth:`start` loads the model (the replica is ready only after it
    returns); everything else is called from one event loop afterwards.
    Errors a client caused are :class:`InvalidRequestError`; a full queue is
    ``EngineOverloadedError``; a failure of the engine itself is ``EngineError``.
    """

    def __init__(self, config: LLMConfig):
        self.config = config
        self.max_model_len = 0

    @abc.abstractmethod
    def start(self) -> None:
        """Load the tokenizer and weights and start generating (blocking); raise if that is impossible."""

    @abc.abstractmethod
    def encode_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of a chat rendered with the tokenizer's chat template (generation prompt added), with
        ``tools`` (OpenAI's shape) given to the template, as the model was trained to read them."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of plain text."""

    @abc.abstractmethod
    def decode(self, ids: list[int]) -> str:
        """The text of token ids (special tokens left out)."""

    @abc.abstractmethod
    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[GenerationChunk]:
        """Generate for one sequence; closing the iterator early aborts it."""

    @abc.abstractmethod
    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One embedding vector per input."""

    async def prompt_logprobs(self, prompt_ids: list[int], top: int) -> list[TokenLogprob]:
        """Each prompt token with its log probability after the tokens before it and the ``top`` likeliest
        alternatives; the first one's is None (nothing comes before it), as OpenAI's ``echo`` gives it.

        Raises:
            InvalidRequestError: this engine cannot score a prompt.
        """
        raise InvalidRequestError(f"echo with logprobs is not available from model {self.config.model_id!r}'s "
                                  "engine; leave logprobs out, or serve it with llm_engine='transformers'.",
                                  param="logprobs")

    @abc.abstractmethod
    def stats(self) -> EngineStats:
        """Current counters."""

    @abc.abstractmethod
    def check_health(self) -> None:
        """Raise if the engine can no longer serve (a replica that fails this is replaced)."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop generating and free the model."""

    def check_prompt(self, prompt_ids: Sequence[int], max_tokens: int | None, vocab_size: int,
                     params: SamplingParams | None = None) -> int:
        """Check a prompt against ``max_model_len`` and the vocabulary (and the tokens of a ``logit_bias``);
        return the tokens to generate.

        Raises:
            InvalidRequestError: the prompt (plus ``max_tokens``) does not fit, or it or ``logit_bias`` holds
                ids outside the vocabulary.
        """
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty: send at least one token of text", param="prompt")
        named = {} if params is None else {"logit_bias": [t for t, _ in params.logit_bias],
                                           "allowed_token_ids": params.allowed_token_ids,
                                           "stop_token_ids": params.stop_token_ids}
        for param, ids in named.items():
            outside = [t for t in ids if not 0 <= t < vocab_size]
            if outside:
                raise InvalidRequestError(
                    f"{param} names token ids {outside[:5]}, outside the vocabulary of {self.config.model_id!r} "
                    f"(0..{vocab_size - 1}); use the ids of this model's tokenizer.", param=param,
                )
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab_size:
            bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
            raise InvalidRequestError(
                f"token ids {bad[:5]} are outside the vocabulary of {self.config.model_id!r} (0..{vocab_size - 1})",
                param="prompt",
            )
        room = self.max_model_len - len(prompt_ids)
        if room <= 0 or (max_tokens is not None and max_tokens > room):
            asked = len(prompt_ids) + (max_tokens or 0)
            raise InvalidRequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{asked} tokens ({len(prompt_ids)} in the prompt, {max_tokens or 0} for the completion). "
                "Shorten the prompt or lower max_tokens (or raise engine_kwargs['max_model_len']).",
                param="max_tokens" if room > 0 else "prompt",  # the chat route names its "messages"
                code="context_length_exceeded",
            )
        return max_tokens if max_tokens is not None else room


class TextAssembler:
    """Turns a growing list of token ids into text deltas, cutting at stop strings.

    Text that could still become a stop string, or a half-decoded UTF-8
    character, is held back until the next tokens decide it.
    """

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str]):
        self._decode = decode  # token ids -> text, special tokens skipped
        self._stop = tuple(stop)
        self._ids: list[int] = []
        self._sent = 0
        self.stopped = False

    def push(self, new_ids: Sequence[int], final: bool) -> str:
        """Add tokens; return the text that is now certain. Sets ``stopped`` when a stop string appeared."""
        self._ids.extend(new_ids)
        text = self._decode(self._ids)
        for stop in self._stop:
            cut = text.find(stop, max(0, self._sent - len(stop)))
            if cut >= 0:
                self.stopped = True
                text = text[:cut]
        if not (final or self.stopped):
            text = text.rstrip("\ufffd")
            text = text[: len(text) - self._held_back(text)]
        delta, self._sent = text[self._sent:], max(self._sent, len(text))
        return delta

    def _held_back(self, text: str) -> int:
        """Length of the longest tail of ``text`` that begins some stop string."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

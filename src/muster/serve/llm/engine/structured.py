"""Structured output on the transformers engine: a grammar for each constrained request, by llguidance.

llguidance (the library vLLM's "guidance" backend uses) compiles a JSON schema, a regex or a list of choices
into a grammar, and a matcher per request says, before each token, which tokens keep the output inside it
(a bitmask over the vocabulary) and, once the output is whole, allows only the end of sequence. The tap
(``_hf_logprobs``) masks the request's logits with it and feeds it each sampled token.

JSON is written compact, with Python's ``json.dumps`` separators (``", "`` and ``": "``) and no other
whitespace: a model cannot pad it with spaces or newlines until ``max_tokens`` runs out.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from muster.serve.llm.engine.base import StructuredOutput
from muster.serve.llm.errors import InvalidRequestError

_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf
    except ImportError as exc:
        raise InvalidRequestError(
            f"structured output needs the llguidance package, which is not installed ({exc}); "
            "pip install 'muster[llm]' (or llguidance), or leave response_format out.", param="response_format",
        ) from exc
    return llguidance


def grammar_of(structured: StructuredOutput) -> str:
    """llguidance's grammar for ``structured``."""
    matcher = _llguidance().LLMatcher
    if structured.kind == "json":
        return str(matcher.grammar_from_json_schema(structured.spec, defaults=_JSON_STYLE))
    if structured.kind == "regex":
        return str(matcher.grammar_from_regex(structured.spec))
    return str(matcher.grammar_from_regex("|".join(f"(?:{re.escape(c)})" for c in structured.choices)))


class Grammars:
    """One model's matchers: the tokenizer llguidance reads (made once, on the first constrained request)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos: int | list[int] | None):
        self._hf_tokenizer, self._vocab_size, self._eos = hf_tokenizer, vocab_size, eos
        self._tokenizer: Any = None

    def matcher(self, structured: StructuredOutput, param: str) -> Any:
        """A fresh matcher of ``structured``.

        Raises:
            InvalidRequestError: llguidance is missing, the tokenizer is not a fast one, or the schema, regex
                or choices do not compile (named, with llguidance's reason).
        """
        llg = _llguidance()
        if self._tokenizer is None:
            try:
                self._tokenizer = llg.hf.from_tokenizer(self._hf_tokenizer, n_vocab=self._vocab_size,
                                                        eos_token=self._eos)
            except ValueError as exc:  # a slow (Python) tokenizer
                raise InvalidRequestError(f"structured output needs a fast tokenizer for this model ({exc}).",
                                          param=param) from exc
        try:
            grammar = grammar_of(structured)
        except ValueError as exc:
            raise InvalidRequestError(f"{param} is not valid: {exc}", param=param) from exc
        matcher = llg.LLMatcher(self._tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidRequestError(f"{param} cannot be used: {matcher.get_error()}. Fix the schema or pattern.",
                                      param=param)
        return matcher


def allowed(matcher: Any, vocab_size: int) -> np.ndarray:
    """The tokens ``matcher`` allows next, as a boolean array over the vocabulary."""
    bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[:vocab_size].astype(bool)

"""A tiny random-weight causal LM built offline, for tests, examples and benchmarks.

Nothing is downloaded: a byte-level BPE tokenizer is trained in code on a
small inline corpus, given a chat template, and saved beside a random-weight
Llama (or GPT-2) made from a config with ``save_pretrained``. The directory
loads with ``AutoTokenizer``/``AutoModelForCausalLM`` and with vLLM, so it
works as an ``LLMConfig`` ``model_source``. Its output is gibberish, but
greedy decoding is deterministic.
"""

from __future__ import annotations

from pathlib import Path

from muster.exceptions import InvalidArgumentError

CHAT_TEMPLATE = (  # the names of the tools and of earlier calls (real templates give their JSON; this is short)
    "{% if tools %}<|tools|>{% for t in tools %}{{ t.function.name }} {% endfor %}</s>\n{% endif %}"
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}"
    "{% for c in message.tool_calls or [] %}{{ c.function.name }}({{ c.function.arguments | tojson }}){% endfor %}"
    "</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_CORPUS = [
    "Explain gradient checkpointing in two sentences.",
    "The quick brown fox jumps over the lazy dog.",
    "Continuous batching lets requests join and leave a running batch at every decoding step.",
    "A key-value cache keeps the attention keys and values of every token already seen.",
    "Hello world! How are you today? I am fine, thank you.",
    "Serving a language model means turning prompts into tokens, and tokens back into text.",
    "system user assistant: you are a helpful assistant. 0123456789",
]


def build_tiny_model(
    path: str | Path,
    *,
    architecture: str = "llama",
    chat_template: bool = True,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_positions: int = 512,
    seed: int = 0,
) -> Path:
    """Write a tokenizer and a random-weight causal LM to ``path`` and return it.

    Args:
        path: the directory to write (created if missing).
        architecture: ``"llama"`` or ``"gpt2"``.
        chat_template: save the tokenizer with a chat template (False makes a model
            that only ``/v1/completions`` can serve).
        hidden_size: width of the model.
        num_layers: number of transformer blocks.
        max_positions: longest sequence the model accepts.
        seed: seed of the random weights.

    Raises:
        InvalidArgumentError: ``architecture`` is not one of the two above.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel,
                              PreTrainedTokenizerFast)

    if architecture not in ("llama", "gpt2"):
        raise InvalidArgumentError(f"architecture={architecture!r}: use 'llama' or 'gpt2'")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    ids: dict[str, int] = {name: _token_id(tokenizer.convert_tokens_to_ids(name)) for name in ("<s>", "</s>", "<pad>")}
    torch.manual_seed(seed)
    model: PreTrainedModel
    if architecture == "llama":
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=max_positions, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
            pad_token_id=ids["<pad>"], tie_word_embeddings=False,
        ))
    else:
        model = GPT2LMHeadModel(GPT2Config(
            vocab_size=len(tokenizer), n_embd=hidden_size, n_layer=num_layers, n_head=4, n_positions=max_positions,
            bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"],
        ))
    model.save_pretrained(out)
    return out


def _token_id(found: int | list[int]) -> int:
    """One token's id (``convert_tokens_to_ids`` of a single token gives an int)."""
    return found if isinstance(found, int) else found[0]

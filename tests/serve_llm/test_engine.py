"""The transformers engine driven directly: continuous batching, determinism, stop, abort, limits, faults."""

from __future__ import annotations

import asyncio

import pytest

from muster.serve.llm import EngineError, EngineOverloadedError, InvalidRequestError, LLMConfig
from muster.serve.llm.engine import SamplingParams
from muster.serve.llm.engine.base import TextAssembler
from muster.serve.llm.engine.hf import TransformersEngine

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def engine(tiny_model):
    eng = TransformersEngine(LLMConfig(
        model_loading_config=dict(model_id="tiny", model_source=str(tiny_model)), llm_engine="transformers",
        engine_kwargs=dict(max_model_len=128, max_num_seqs=16, max_waiting_requests=4),
    ))
    eng.start()
    yield eng
    eng.shutdown()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def complete(engine, prompt, **params):
    params.setdefault("max_tokens", 12)
    params.setdefault("temperature", 0.0)
    text, last = [], None
    async for chunk in engine.generate(prompt, SamplingParams(**params)):
        text.append(chunk.text)
        last = chunk
    return "".join(text), last


def test_greedy_matches_plain_generate_and_is_deterministic(engine):
    import torch

    prompt = engine.encode_chat([{"role": "user", "content": "Explain gradient checkpointing."}])
    text, last = run(complete(engine, prompt, max_tokens=12))
    again, _ = run(complete(engine, prompt, max_tokens=12))
    ref = engine.model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert text == again
    assert text == engine.tokenizer.decode(ref[0, len(prompt):], skip_special_tokens=True)
    assert last.finish_reason == "length" and last.num_generated_tokens == 12 and last.num_prompt_tokens == len(prompt)


def test_concurrent_requests_share_decoding_steps(engine):
    """8 requests of 16 tokens each: one-at-a-time decoding needs >= 128 steps; a shared batch ~16."""
    prompts = [engine.encode(f"request number {i} about the lazy dog") for i in range(8)]

    async def together():
        before = engine.stats().steps
        results = await asyncio.gather(*(complete(engine, p, max_tokens=16) for p in prompts))
        return engine.stats().steps - before, results

    steps, results = run(together())
    assert all(r[1].num_generated_tokens == 16 for r in results)
    assert steps <= 16 + 8, f"8 concurrent requests took {steps} decoding steps; a shared batch needs about 16"
    # and each batched result equals the same request run alone
    alone, _ = run(complete(engine, prompts[3], max_tokens=16))
    assert results[3][0] == alone


def test_requests_join_a_running_batch(engine):
    """A request that arrives mid-generation joins the batch instead of waiting for it to finish."""
    prompt = engine.encode("the quick brown fox")

    async def staggered():
        before = engine.stats().steps
        first = asyncio.create_task(complete(engine, prompt, max_tokens=40))
        while engine.stats().steps - before < 5:
            await asyncio.sleep(0.005)
        second = await complete(engine, prompt, max_tokens=10)
        mid = engine.stats().steps - before
        await first
        return mid, engine.stats().steps - before

    second_done_at, total = run(staggered())
    assert second_done_at < 40, "the second request finished before the first one: it ran inside the same batch"
    assert total <= 40 + 3


def test_stop_string_cuts_the_text(engine):
    prompt = engine.encode("hello world")
    full, _ = run(complete(engine, prompt, max_tokens=20))
    stop = full[4:7]
    text, last = run(complete(engine, prompt, max_tokens=20, stop=(stop,)))
    assert last.finish_reason == "stop"
    assert text == full[: full.index(stop)]


def test_the_rust_tokenizer_fast_path_gives_what_the_wrapper_gives(engine):
    tok = engine.tokenizer
    assert engine._ids_of.__name__ == "fast_ids" and engine._text_of.__name__ == "fast_text"  # the tiny model's is fast
    texts = ("Explain gradient checkpointing.", "  tabs\tand\nnewlines ", "\u00fcn\u00efcode \u2713 \u4f60\u597d", "a")
    for text in texts:
        assert engine.encode(text) == list(tok(text)["input_ids"])
        ids = engine.encode(text)
        assert engine._text_of(ids) == tok.decode(ids, skip_special_tokens=True)
    msgs = [{"role": "user", "content": "hi there"}]
    assert engine.encode_chat(msgs) == list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                                                    return_dict=True)["input_ids"])


def test_text_assembler_holds_back_a_possible_stop_prefix():
    asm = TextAssembler(lambda ids: "".join(chr(i) for i in ids), stop=["END"])
    out = [asm.push([ord(c)], final=False) for c in "abcEN"]
    assert "".join(out) == "abc"  # "EN" may still become END
    assert asm.push([ord("X")], final=False) == "ENX"
    assert asm.push([ord(c) for c in "yEND"], final=False) == "y" and asm.stopped


def test_abort_frees_the_slot(engine):
    prompt = engine.encode("abort me")

    async def start_then_close():
        gen = engine.generate(prompt, SamplingParams(max_tokens=100, temperature=0.0))
        await anext(gen)
        await gen.aclose()
        before = engine.stats().generated_tokens
        for _ in range(200):
            if engine.stats().running == 0:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        return engine.stats(), before

    stats, before = run(start_then_close())
    assert stats.running == 0 and stats.waiting == 0
    assert stats.generated_tokens - before <= 3, "an aborted request kept generating"


def test_prompt_longer_than_max_model_len_is_a_400(engine):
    with pytest.raises(InvalidRequestError, match="maximum context length is 128") as err:
        run(complete(engine, list(range(5, 125)), max_tokens=20))
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        run(complete(engine, [10**6], max_tokens=2))


def test_full_queue_is_refused_with_503(engine):
    """max_num_seqs=16 + max_waiting_requests=4: the 21st request in flight is refused at once."""
    prompt = engine.encode("load")

    async def flood():
        gens = [engine.generate(prompt, SamplingParams(max_tokens=50, temperature=0.0)) for _ in range(20)]
        try:
            for g in gens:
                await anext(g)
            with pytest.raises(EngineOverloadedError, match="overloaded") as err:
                await anext(engine.generate(prompt, SamplingParams(max_tokens=5)))
            return err.value.status
        finally:
            for g in gens:
                await g.aclose()

    assert run(flood()) == 503
    assert run(complete(engine, prompt, max_tokens=3))[1].num_generated_tokens == 3


def test_engine_fault_fails_running_requests_then_recovers(engine):
    """A forward pass that raises fails the requests in the batch (EngineError, HTTP 500); the next request
    restarts the decoding loop."""
    prompt = engine.encode("fault")
    calls = {"n": 0}

    def explode(module, args, kwargs):
        calls["n"] += 1
        raise RuntimeError("injected fault in the forward pass")

    hook = engine.model.register_forward_pre_hook(explode, with_kwargs=True)
    try:
        with pytest.raises(EngineError, match="injected fault") as err:
            run(complete(engine, prompt, max_tokens=5))
        assert err.value.status == 500 and calls["n"] >= 1
    finally:
        hook.remove()
    text, last = run(complete(engine, prompt, max_tokens=5))
    assert last.num_generated_tokens == 5
    engine.check_health()


def test_embeddings_are_mean_pooled_hidden_states(engine):
    import torch

    ids = engine.encode("embed me")
    [vector] = run(engine.embed([ids]))
    with torch.no_grad():
        hidden = engine.model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
    assert torch.allclose(torch.tensor(vector), hidden.mean(0), atol=1e-5)
    assert len(vector) == engine.model.config.hidden_size


def test_a_transformers_too_old_for_the_engine_is_named_with_the_fix(tiny_model, monkeypatch):
    """transformers 5.17 (found on a GPU machine) failed inside its own ContinuousBatchingConfig with
    "unexpected keyword argument 'page_size'"; 5.18 broke plain forwards after the batching started."""
    import transformers

    from muster.serve.llm import LLMConfigError

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    eng = TransformersEngine(LLMConfig(model_loading_config=dict(model_id="tiny", model_source=str(tiny_model)),
                                       llm_engine="transformers"))
    with pytest.raises(LLMConfigError, match=r"'tiny'.*transformers >= 5.19, and 5.17.0 is installed.*pip install -U"):
        eng.start()


def test_a_replica_sharing_a_gpu_caps_its_kv_cache_at_its_share(tiny_model):
    """transformers sizes the KV cache from the whole device (80-90%); a replica with num_gpus=0.5 took that
    much, leaving the GPU's other replica no room. (Run for real on an H200: benchmarks/llm_gpu_share.py.)"""
    def share(actor_options, **engine_kwargs):
        return TransformersEngine(LLMConfig(
            model_loading_config=dict(model_id="tiny", model_source=str(tiny_model)), llm_engine="transformers",
            engine_kwargs=engine_kwargs, deployment_config=dict(ray_actor_options=actor_options)))._gpu_memory_share()

    assert share({"num_gpus": 0.5}) == pytest.approx(0.45)
    assert share({"num_gpus": 0.5}, gpu_memory_utilization=0.3) == 0.3  # vLLM's name, set by hand
    assert share({"num_gpus": 1}) is None and share({}) is None  # a whole GPU: transformers' own default


def test_logprobs_are_the_raw_models_log_softmax_and_top_k_restricts_sampling(engine):
    """Each token's logprob and its top 5 are the plain model's log-softmax at that place (vLLM's default
    "raw_logprobs": before temperature and top_k, so top_k=1 at temperature 0.5 reports the same numbers)."""
    import torch

    prompt = engine.encode("the lazy dog jumps")

    async def entries(**params):
        return [e async for c in engine.generate(prompt, SamplingParams(max_tokens=4, logprobs=5, **params))
                for e in c.logprobs]

    greedy = run(entries(temperature=0.0))
    ref = engine.model.generate(torch.tensor([prompt]), max_new_tokens=4, min_new_tokens=4, do_sample=False)
    with torch.no_grad():
        raw = torch.log_softmax(engine.model(ref).logits[0, len(prompt) - 1:-1].float(), dim=-1)
    assert len(greedy) == 4
    for i, e in enumerate(greedy):
        assert e.logprob == pytest.approx(raw[i, ref[0, len(prompt) + i]].item(), abs=1e-4)
        assert [v for _, v in e.top] == pytest.approx(raw[i].topk(5).values.tolist(), abs=1e-4)
        assert e.token == engine.tokenizer.decode(ref[0, len(prompt):len(prompt) + i + 1]).removeprefix(
            engine.tokenizer.decode(ref[0, len(prompt):len(prompt) + i]))
    narrowed = run(entries(temperature=0.5, top_k=1))
    assert [e.token for e in narrowed] == [e.token for e in greedy]
    assert [e.logprob for e in narrowed] == pytest.approx([e.logprob for e in greedy], abs=1e-5)

    async def chunks():
        return [c async for c in engine.generate(prompt, SamplingParams(max_tokens=3, temperature=0.0))]

    assert all(c.logprobs == () for c in run(chunks()))  # not asked: none


def test_top_k_samples_among_the_k_most_likely_tokens(engine):
    """At temperature 2 the tiny random model's distribution is near flat: without top_k nearly every token
    falls outside its place's top 2; with top_k=2 each one is among them."""
    prompt = engine.encode("a flat distribution")

    async def entries(**params):
        return [e async for c in engine.generate(prompt, SamplingParams(max_tokens=12, temperature=2.0, logprobs=2,
                                                                        **params)) for e in c.logprobs]

    def in_top(found):
        return [e.logprob in [v for _, v in e.top] for e in found]

    assert all(in_top(run(entries(top_k=2))))
    assert not all(in_top(run(entries(top_k=-1)))) and not all(in_top(run(entries(top_k=0))))


def test_logprobs_and_top_k_are_refused_where_the_decoding_step_cannot_be_hooked():
    """A loop that transformers runs with async batching (or CUDA graphs) would skip the hooks: refused by name.
    (A stand-in for transformers' batch processor: this engine's SDPA models never get such a loop.)"""
    from types import SimpleNamespace

    from muster.serve.llm.engine._hf_logprobs import LogprobTap, Shaping

    tap = LogprobTap("m")
    tap._tap(SimpleNamespace(use_async_batching=True, model_runner=SimpleNamespace(pad_inputs=False)))
    with pytest.raises(InvalidRequestError, match=r"logprobs is not available from model 'm': .*async batching"):
        tap.want("r", 2)
    with pytest.raises(InvalidRequestError, match=r"top_k is not available .*llm_engine='vllm'"):
        tap.want("r", None, Shaping(top_k=5))
    with pytest.raises(InvalidRequestError, match=r"frequency_penalty is not available .*llm_engine='vllm'"):
        tap.want("r", None, Shaping(frequency_penalty=0.5))


def _reference(engine, prompt, steps, presence=0.0, frequency=0.0, repetition=1.0, bias=()):
    """Greedy decoding of the plain model with the penalties and bias applied by hand, as vLLM and OpenAI
    define them: bias added; repetition divides positive logits (multiplies negative ones) of tokens in the
    prompt or output; presence and frequency subtracted per token generated (once / per time)."""
    import torch

    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = engine.model(torch.tensor([ids])).logits[0, -1].float()
            for token, b in bias:
                logits[token] += b
            out = ids[len(prompt):]
            for token in set(ids):
                if repetition != 1.0:
                    logits[token] = logits[token] / repetition if logits[token] > 0 else logits[token] * repetition
            for token in set(out):
                logits[token] -= frequency * out.count(token) + presence
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def test_penalties_and_logit_bias_shape_greedy_decoding_as_vllm_defines_them(engine):
    """Refused before: presence/frequency penalties, logit_bias and vLLM's repetition_penalty. Greedy output
    with each is the plain model's greedy decoding with the penalty applied by hand."""
    prompt = engine.encode("1 2 3 4 5 6 7 8")  # the tiny model's greedy output repeats one token 7 times

    async def tokens(**params):
        found = [e async for c in engine.generate(prompt, SamplingParams(max_tokens=10, temperature=0.0,
                                                                         logprobs=0, **params))
                 for e in c.logprobs]
        return found

    plain = _reference(engine, prompt, 10)
    assert len(set(plain)) < len(plain)  # greedy repeats itself: the penalties have something to change
    for params in (dict(presence_penalty=1.5), dict(frequency_penalty=2.0), dict(repetition_penalty=1.8),
                   dict(presence_penalty=-2.0, frequency_penalty=0.5)):
        ref = _reference(engine, prompt, 10, presence=params.get("presence_penalty", 0.0),
                         frequency=params.get("frequency_penalty", 0.0),
                         repetition=params.get("repetition_penalty", 1.0))
        assert ref != plain, params
        found = run(tokens(**params))
        text = engine.tokenizer.decode(ref)
        assert "".join(e.token for e in found) == text, params
    favoured, banned = plain[3], plain[0]
    forced = run(tokens(logit_bias=((favoured, 100.0),)))
    assert [e.token for e in forced] == [engine.tokenizer.decode([favoured])] * 10
    avoided = run(tokens(logit_bias=((banned, -100.0),)))
    assert "".join(e.token for e in avoided) == engine.tokenizer.decode(
        _reference(engine, prompt, 10, bias=((banned, -100.0),)))
    with pytest.raises(InvalidRequestError, match=r"logit_bias names token ids \[999999\], outside the vocabulary"):
        run(tokens(logit_bias=((999999, 5.0),)))


def test_structured_output_keeps_the_text_inside_a_schema_a_regex_or_choices(engine):
    """Refused before (no constrained decoding). Each constrained greedy answer of the random tiny model is
    whole and inside its constraint and ends the sequence there; an unconstrained request in the same batch
    is the plain greedy answer (rows are paired with their own requests)."""
    import json
    import re

    from muster.serve.llm.engine.base import StructuredOutput

    prompt = engine.encode("answer me")
    schema = {"type": "object", "required": ["answer", "n"], "additionalProperties": False,
              "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer", "minimum": 0, "maximum": 99}}}
    cases = {
        "schema": StructuredOutput("json", json.dumps(schema)),
        "object": StructuredOutput("json", '{"type": "object"}'),
        "regex": StructuredOutput("regex", r"[0-9]{3}-[a-z]{2}"),
        "choice": StructuredOutput("choice", choices=("yes", "no", "maybe (a.b)")),
    }

    async def together():
        runs = [complete(engine, prompt, max_tokens=40, structured=s) for s in cases.values()]
        return await asyncio.gather(complete(engine, prompt, max_tokens=8), *runs)

    (free, _), *constrained = run(together())
    results = dict(zip(cases, constrained))
    for name, (text, last) in results.items():
        assert last.finish_reason == "stop", (name, text)
    answer = json.loads(results["schema"][0])
    assert set(answer) == {"answer", "n"} and answer["answer"] in ("yes", "no") and 0 <= answer["n"] <= 99
    assert isinstance(json.loads(results["object"][0]), dict)
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", results["regex"][0])
    assert results["choice"][0] in ("yes", "no", "maybe (a.b)")
    assert free == run(complete(engine, prompt, max_tokens=8))[0]
    with pytest.raises(InvalidRequestError, match=r"response_format cannot be used: .*objekt"):
        run(complete(engine, prompt, structured=StructuredOutput("json", '{"type": "objekt"}')))
    assert engine.stats().running == 0  # the refused request holds no slot


def test_a_stop_string_ends_the_request_in_the_engine_too(engine):
    """A request cut by a stop string went on decoding in the engine up to max_tokens (it was never
    cancelled there), holding a batch slot and taking steps for text nobody reads."""
    prompt = engine.encode("hello world")
    full, _ = run(complete(engine, prompt, max_tokens=8))
    before = engine.stats().steps
    text, last = run(complete(engine, prompt, max_tokens=100, stop=(full[4:7],)))
    assert last.finish_reason == "stop" and text == full[: full.index(full[4:7])]
    assert _idle(engine) and engine.stats().steps - before < 30


def _idle(engine, timeout_s: float = 10.0) -> bool:
    """Whether the engine runs no request within ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while engine.stats().running and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine.stats().running == 0


def test_vllms_min_tokens_ignore_eos_allowed_and_stop_token_ids_and_min_p(engine):
    """vLLM's extra sampling parameters, refused before: the end of sequence (pushed with a +100 bias) held off
    for min_tokens or for ever (ignore_eos); only allowed_token_ids sampled; a stop token ends the output (kept)
    and its request in the engine; min_p keeps only tokens within that share of the likeliest one's tempered
    probability."""
    import math

    import torch

    prompt = engine.encode("the lazy dog")
    eos = engine.tokenizer.eos_token_id
    soon = run(complete(engine, prompt, max_tokens=12, logit_bias=((eos, 100.0),)))[1]
    assert soon.finish_reason == "stop" and soon.num_generated_tokens <= 1
    held = run(complete(engine, prompt, max_tokens=12, logit_bias=((eos, 100.0),), min_tokens=5))[1]
    assert held.finish_reason == "stop" and 5 <= held.num_generated_tokens <= 6
    never = run(complete(engine, prompt, max_tokens=12, logit_bias=((eos, 100.0),), ignore_eos=True))[1]
    assert never.finish_reason == "length" and never.num_generated_tokens == 12
    ref = engine.model.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    greedy = ref[0, len(prompt):].tolist()
    only = greedy[2]
    text, _ = run(complete(engine, prompt, max_tokens=6, temperature=1.0, allowed_token_ids=(only, greedy[5])))
    assert set(engine.tokenizer(text, add_special_tokens=False)["input_ids"]) <= {only, greedy[5]}
    stopped_at = greedy.index(greedy[3])  # the first place the stop token comes
    text, last = run(complete(engine, prompt, max_tokens=8, stop_token_ids=(greedy[3],)))
    assert last.finish_reason == "stop" and text == engine.tokenizer.decode(greedy[:stopped_at + 1])
    assert _idle(engine)  # the request stopped here is cancelled in the engine

    async def entries(**params):
        return [e async for c in engine.generate(prompt, SamplingParams(max_tokens=16, temperature=2.0, logprobs=1,
                                                                        ignore_eos=True, **params)) for e in c.logprobs]

    def within(found, share):  # the token's tempered probability over the likeliest one's is at least `share`
        return [math.exp((e.logprob - e.top[0][1]) / 2.0) >= share - 1e-4 for e in found]

    assert all(within(run(entries(min_p=0.8)), 0.8))
    assert not all(within(run(entries()), 0.8))

"""LLMConfig validation and how it maps to replica resources (no GPU needed)."""

from __future__ import annotations

import pytest

from muster.serve.llm import LLMConfig, LLMConfigError, build_openai_app
from muster.serve.llm.engine.hf import TransformersEngine


def config(**kw):
    kw.setdefault("model_loading_config", dict(model_id="m", model_source="/nowhere"))
    kw.setdefault("llm_engine", "transformers")
    return LLMConfig(**kw)


def test_seed_config_maps_to_gpus_and_accelerator_resource():
    cfg = config(
        accelerator_type="A100",
        deployment_config=dict(autoscaling_config=dict(min_replicas=1, max_replicas=4)),
        engine_kwargs=dict(max_model_len=8192, tensor_parallel_size=2),
    )
    assert cfg.model_id == "m" and cfg.model_source == "/nowhere"
    assert cfg.num_gpus() == 2
    opts = cfg.deployment_options()
    assert opts["ray_actor_options"]["num_gpus"] == 2
    assert opts["ray_actor_options"]["resources"] == {"accelerator_type:A100": 0.001}
    assert opts["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4}


def test_pipeline_parallel_multiplies_gpus_and_cpu_default_holds_none():
    assert config(engine_kwargs=dict(tensor_parallel_size=2, pipeline_parallel_size=2)).num_gpus() == 4
    assert config(accelerator_type="L4").num_gpus() == 1
    plain = config()
    assert plain.num_gpus() == 0 and "ray_actor_options" not in plain.deployment_options()


def test_model_source_defaults_to_model_id():
    cfg = LLMConfig(model_loading_config=dict(model_id="org/model"), llm_engine="transformers")
    assert cfg.model_source == "org/model"
    assert cfg.model_loading_config["model_source"] == "org/model"  # read as a mapping too, as Ray's docs do


def test_rays_other_llm_config_fields_and_names():
    import importlib

    from muster.exceptions import UnsupportedRayImportError

    # Ray's "vLLM" spelling
    assert config(llm_engine="Transformers", log_engine_metrics=True).llm_engine == "transformers"
    with pytest.warns(UserWarning, match=r"placement_group_config=...\) has no effect"):
        config(placement_group_config={"bundles": [{"GPU": 1}]})
    with pytest.raises(LLMConfigError, match="LoRA adapters are not supported"):
        config(lora_config={"dynamic_lora_loading_path": "s3://x"})
    with pytest.raises(UnsupportedRayImportError, match=r"muster.serve.llm.LLMRouter .*build_openai_app"):
        from muster.serve.llm import LLMRouter  # noqa: F401 - Ray 2.44's bind pattern
    with pytest.raises(UnsupportedRayImportError, match=r"muster.serve.llm.deployment .*build_llm_deployment"):
        importlib.import_module("muster.serve.llm.deployment")


@pytest.mark.parametrize("kw, words", [
    (dict(model_loading_config=dict(model_id="")), ["model_id=''"]),
    (dict(model_loading_config=dict(model_id="m", source="x")), ["unknown keys", "source"]),
    (dict(llm_engine="tgi"), ["llm_engine='tgi'"]),
    (dict(engine_kwargs=dict(max_model_len=0)), ["max_model_len", "positive integer"]),
    (dict(engine_kwargs=dict(tensor_parallel_size="2")), ["tensor_parallel_size", "positive integer"]),
    (dict(engine_kwargs=dict(enforce_eager=True)), ["enforce_eager", "transformers engine", "muster[vllm]"]),
    (dict(engine_kwargs=dict(gpu_memory_utilization=1.5)), ["gpu_memory_utilization", "1.5", "(0, 1]"]),
    (dict(engine_kwargs=dict(dtype="int3")), ["dtype", "bfloat16"]),
    (dict(deployment_config=dict(replicas=2)), ["unknown keys", "replicas", "num_replicas"]),
    # Ray's ModelLoadingConfig field and its embeddings guide's task="embed" were "unknown" keys before
    (dict(model_loading_config=dict(model_id="m", tokenizer_source="")), ["tokenizer_source=''", "model_source"]),
    (dict(engine_kwargs=dict(task="classify")), ["engine_kwargs['task']='classify'", "'embed'"]),
])
def test_bad_values_are_named(kw, words):
    with pytest.raises(LLMConfigError) as err:
        config(**kw)
    for word in words:
        assert word in str(err.value)


def test_vllm_engine_needs_vllm_installed():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; this checks the error when it is not")
    with pytest.raises(LLMConfigError, match=r'pip install "muster\[vllm\]"'):
        config(llm_engine="vllm")
    assert config(llm_engine="auto").resolved_engine() == "transformers"


def test_tensor_parallel_on_a_gpu_less_replica_fails_clearly(tiny_model):
    """tensor_parallel_size=2 asks the replica for 2 GPUs; without them the engine refuses to start."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 GPUs: the request can be met")
    engine = TransformersEngine(config(model_loading_config=dict(model_id="m", model_source=str(tiny_model)),
                                       engine_kwargs=dict(tensor_parallel_size=2)))
    with pytest.raises(LLMConfigError, match=r"asks for 2 GPU\(s\) per replica.*sees \d"):
        engine.start()


def test_duplicate_model_ids_and_empty_config_list_are_refused():
    cfg = config()
    with pytest.raises(LLMConfigError, match="more than one llm_config"):
        build_openai_app({"llm_configs": [cfg, cfg]})
    with pytest.raises(LLMConfigError, match="non-empty list"):
        build_openai_app({"llm_configs": []})


def test_app_deployments_carry_the_replica_resources():
    """One model: its LLMServer deployment is the whole app (it answers HTTP); several: an OpenAiIngress
    that holds no CPU routes to one LLMServer deployment per model."""
    from muster.serve._internal import plan

    cfg = config(accelerator_type="A100", engine_kwargs=dict(tensor_parallel_size=2))
    ingress, plans = plan.build(build_openai_app({"llm_configs": [cfg]}), "llm")
    assert ingress == "LLMServer:m" and [p.name for p in plans] == [ingress]
    other = config(model_loading_config=dict(model_id="other", model_source="/nowhere"))
    ingress, plans = plan.build(build_openai_app({"llm_configs": [cfg, other]}), "llm")
    by_name = {p.name: p for p in plans}
    server = by_name["LLMServer:m"]
    assert server.config.ray_actor_options["num_gpus"] == 2
    assert server.config.ray_actor_options["resources"] == {"accelerator_type:A100": 0.001}
    assert ingress == "OpenAiIngress" and by_name[ingress].config.ray_actor_options["num_cpus"] == 0
    assert sorted(by_name) == ["LLMServer:m", "LLMServer:other", "OpenAiIngress"]


def test_serve_config_file_can_name_build_openai_app_as_its_builder(tmp_path):
    """`import_path: muster.serve.llm:build_openai_app` with `args: {llm_configs: [...]}`, as in Ray's YAML."""
    from muster.serve import schema
    from muster.serve._internal import plan

    (tmp_path / "serve.yaml").write_text(
        "applications:\n"
        "  - name: llms\n"
        "    route_prefix: /\n"
        "    import_path: muster.serve.llm:build_openai_app\n"
        "    args:\n"
        "      llm_configs:\n"
        "        - model_loading_config: {model_id: a, model_source: /models/a}\n"
        "          llm_engine: transformers\n"
        "          engine_kwargs: {max_model_len: 512}\n"
        "        - model_loading_config: {model_id: b}\n"
        "          llm_engine: transformers\n"
    )
    config = schema.load_config(str(tmp_path / "serve.yaml"))
    (app_config,) = config.applications
    app = schema.import_app(app_config.import_path, app_config.args)
    ingress, plans = plan.build(app, "llms")
    assert sorted(p.name for p in plans) == ["LLMServer:a", "LLMServer:b", ingress]
    (a,) = [p for p in plans if p.name == "LLMServer:a"]
    assert a.args[0].engine_kwargs == {"max_model_len": 512}


def test_deployment_config_takes_the_options_serve_deployments_take():
    """logging_config and deployment_actors (Ray 2.60's deployment options) reach the LLMServer deployment;
    route_prefix stays serve.run's."""
    from muster.serve._internal import plan
    from muster.serve.config import DeploymentActorConfig

    actor = DeploymentActorConfig(name="counter", actor_class="collections:Counter")
    cfg = config(deployment_config=dict(logging_config=dict(log_level="DEBUG"), deployment_actors=[actor],
                                        max_queued_requests=7))
    _, plans = plan.build(build_openai_app({"llm_configs": [cfg]}), "llm")
    server = plans[0].config
    assert server.logging_config.log_level == "DEBUG"
    assert [a.name for a in server.deployment_actors] == ["counter"]
    assert server.max_queued_requests == 7
    with pytest.raises(LLMConfigError, match=r"route_prefix.*serve\.run\(app, route_prefix=\.\.\.\)"):
        config(deployment_config=dict(route_prefix="/x"))

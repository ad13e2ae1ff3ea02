"""``LLMConfig``: what model to serve, on which engine, with which resources (Ray Serve LLM's names).

Everything is checked when the config is built, so a typo in an engine
argument or an impossible resource request fails in the driver with the bad
value named, not minutes later inside a replica.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from dataclasses import dataclass, field
from typing import Any

from muster.serve.config import NO_EFFECT, DeploymentConfig, removed_options_hint
from muster.serve.llm.errors import LLMConfigError

ENGINES = ("auto", "transformers", "vllm")

# Ray Serve LLM's (vLLM's server's) tool-calling settings, read by muster's server layer for either engine.
TOOL_KWARGS = {
    "enable_auto_tool_choice": "True: tool_choice 'auto' (the default with tools) reads the calls the model writes "
                               "in its answer with tool_call_parser (default False: 'auto' is refused)",
    "tool_call_parser": "the model's tool-call format: 'hermes' (<tool_call> tags: Qwen 2.5/3, Hermes) or "
                        "'llama3_json' (Llama 3.1+)",
}

# engine_kwargs the transformers engine understands (vLLM takes any of its own EngineArgs).
TRANSFORMERS_ENGINE_KWARGS = {
    "max_model_len": "longest prompt + completion, in tokens (default: the model's max_position_embeddings)",
    "max_num_seqs": "most sequences decoded together in one batch (default 64)",
    "max_waiting_requests": "requests allowed to wait for a batch slot before new ones get 503 (default 256)",
    "tensor_parallel_size": "GPUs per replica (layers are split across them with device_map='auto')",
    "pipeline_parallel_size": "multiplies the GPUs per replica (same split as tensor_parallel_size)",
    "dtype": "'auto', 'float32', 'float16' or 'bfloat16' (default 'auto')",
    "device": "'cpu', 'cuda' or 'auto' (default: 'cuda' when the replica holds GPUs, else 'cpu')",
    "num_blocks": "KV cache pages (default: on CPU sized from max_num_seqs and max_model_len; on a GPU as many as "
                  "gpu_memory_utilization allows)",
    "gpu_memory_utilization": "the share of the GPU's memory the KV cache may fill, 0-1 (vLLM's name; default: "
                              "0.9 x the replica's num_gpus when it holds part of a GPU, else transformers' 0.8-0.9)",
    "page_size": "tokens per KV cache page (default 64)",
    "seed": "seed of the engine's sampler (default 0)",
    "trust_remote_code": "let transformers run the model repository's own code (default False)",
    "task": "'generate' (default; 'auto' too) or 'embed' (vLLM's name, as Ray's embeddings guide sets it; "
            "'embedding' too): an embed model answers /v1/embeddings and refuses completions",
    **{name: TOOL_KWARGS[name] for name in TOOL_KWARGS},
}
TASKS = ("auto", "generate", "embed", "embedding")
EMBED_TASKS = ("embed", "embedding")

# Keys of deployment_config: every option @serve.deployment takes (Ray's options that have no effect in muster
# are accepted too; the deployment warns about those).
DEPLOYMENT_KEYS = frozenset({f.name for f in dataclasses.fields(DeploymentConfig)} | set(NO_EFFECT))


@dataclass(kw_only=True)
class ModelLoadingConfig:
    """Where the weights come from and what clients call the model.

    Attributes:
        model_id: the name clients pass as ``model`` (``/v1/models`` lists it).
        model_source: a Hugging Face repository id or a local directory holding
            ``config.json``, the weights and the tokenizer (default: ``model_id``).
        tokenizer_source: where the tokenizer comes from, when not from ``model_source``
            (a Hugging Face repository id or a local directory).
    """

    model_id: str
    model_source: str | None = None
    tokenizer_source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not self.model_id.strip():
            raise LLMConfigError(
                f"model_loading_config.model_id={self.model_id!r} must be a non-empty string: it is the name "
                "clients send as `model`, e.g. model_id='my-llama'."
            )
        if self.model_source is None:
            self.model_source = self.model_id
        if not isinstance(self.model_source, str) or not self.model_source.strip():
            raise LLMConfigError(
                f"model_loading_config.model_source={self.model_source!r} must be a Hugging Face repository id "
                "or a local directory holding the model (config.json, weights, tokenizer)."
            )
        if self.tokenizer_source is not None and (
                not isinstance(self.tokenizer_source, str) or not self.tokenizer_source.strip()):
            raise LLMConfigError(
                f"model_loading_config.tokenizer_source={self.tokenizer_source!r} must be a Hugging Face repository "
                "id or a local directory holding the tokenizer; leave it out to load it from model_source."
            )

    def __getitem__(self, key: str) -> Any:
        """``config["model_source"]``, as Ray's (a pydantic model there, read either way in its docs)."""
        if key not in ("model_id", "model_source", "tokenizer_source"):
            raise KeyError(key)
        return getattr(self, key)


@dataclass(kw_only=True)
class LLMConfig:
    """One model to serve behind the OpenAI routes.

    Attributes:
        model_loading_config: a :class:`ModelLoadingConfig` or a dict with its fields.
        llm_engine: ``"transformers"`` (continuous batching over a Hugging Face model),
            ``"vllm"`` (needs ``pip install "muster[vllm]"``) or ``"auto"``: vLLM when it is
            installed, else transformers.
        accelerator_type: a GPU type such as ``"A100"``; the replica then asks for GPUs on
            a node that has that type.
        deployment_config: options of the serving deployment, as ``@serve.deployment`` takes them
            (``autoscaling_config``, ``num_replicas``, ``max_ongoing_requests``, ``ray_actor_options``,
            ``logging_config``, ``deployment_actors``, ...).
        engine_kwargs: arguments for the engine (``max_model_len``, ``tensor_parallel_size``,
            ...); see ``TRANSFORMERS_ENGINE_KWARGS`` for what the transformers engine takes.
        runtime_env: passed on to the replicas' ``ray_actor_options``.
    """

    model_loading_config: ModelLoadingConfig | dict[str, Any]
    llm_engine: str = "auto"
    accelerator_type: str | None = None
    deployment_config: dict[str, Any] = field(default_factory=dict)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    runtime_env: dict[str, Any] | None = None
    log_engine_metrics: bool = True  # Ray's switch: muster's engines always keep their metrics (``stats``)
    experimental_configs: dict[str, Any] = field(default_factory=dict)
    placement_group_config: dict[str, Any] | None = None
    lora_config: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.model_loading_config, dict):
            unknown = set(self.model_loading_config) - {"model_id", "model_source", "tokenizer_source"}
            if unknown:
                raise LLMConfigError(
                    f"model_loading_config has unknown keys {sorted(unknown)}; it takes model_id, model_source "
                    "and tokenizer_source."
                )
            self.model_loading_config = ModelLoadingConfig(**self.model_loading_config)
        elif not isinstance(self.model_loading_config, ModelLoadingConfig):
            raise LLMConfigError(
                f"model_loading_config={self.model_loading_config!r} must be a dict(model_id=..., model_source=...)."
            )
        if isinstance(self.llm_engine, str):
            self.llm_engine = self.llm_engine.lower()  # Ray spells its engine "vLLM"
        if self.llm_engine not in ENGINES:
            raise LLMConfigError(f"llm_engine={self.llm_engine!r} is not one of {ENGINES}.")
        if self.lora_config is not None:
            raise LLMConfigError("lora_config: LoRA adapters are not supported; serve a model with the adapter "
                                 "merged into its weights (peft's merge_and_unload), one LLMConfig per model.")
        for name in ("experimental_configs", "placement_group_config"):
            if getattr(self, name):
                warnings.warn(f"LLMConfig({name}=...) has no effect in muster: each replica holds the resources "
                              "of its deployment_config's ray_actor_options (and accelerator_type).", stacklevel=3)
        if self.accelerator_type is not None and (
                not isinstance(self.accelerator_type, str) or not self.accelerator_type):
            raise LLMConfigError(f"accelerator_type={self.accelerator_type!r} must be a GPU type name such as 'A100'.")
        if not isinstance(self.deployment_config, dict):
            raise LLMConfigError(f"deployment_config={self.deployment_config!r} must be a dict of deployment options.")
        unknown = set(self.deployment_config) - DEPLOYMENT_KEYS
        if unknown:
            raise LLMConfigError(
                f"deployment_config has unknown keys {sorted(unknown)}; allowed: {sorted(DEPLOYMENT_KEYS)}."
                + removed_options_hint(sorted(unknown))
            )
        if not isinstance(self.engine_kwargs, dict):
            raise LLMConfigError(f"engine_kwargs={self.engine_kwargs!r} must be a dict of engine arguments.")
        self._check_engine_kwargs()

    @property
    def model_id(self) -> str:
        """The name clients pass as ``model``."""
        return self._loading.model_id

    @property
    def model_source(self) -> str:
        """Where the weights are loaded from."""
        return str(self._loading.model_source)

    @property
    def tokenizer_source(self) -> str:
        """Where the tokenizer is loaded from: ``tokenizer_source``, else ``model_source``."""
        return self._loading.tokenizer_source or self.model_source

    @property
    def embeds_only(self) -> bool:
        """Whether ``engine_kwargs`` set vLLM's ``task="embed"``: the model answers ``/v1/embeddings`` only."""
        return self.engine_kwargs.get("task") in EMBED_TASKS

    @property
    def _loading(self) -> ModelLoadingConfig:
        assert isinstance(self.model_loading_config, ModelLoadingConfig)  # normalised in __post_init__
        return self.model_loading_config

    def resolved_engine(self) -> str:
        """``"vllm"`` or ``"transformers"``: the engine ``llm_engine`` names once ``"auto"`` is decided."""
        if self.llm_engine == "auto":
            return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
        return self.llm_engine

    def num_gpus(self) -> int:
        """GPUs one replica holds: ``tensor_parallel_size * pipeline_parallel_size`` when either is set
        or an ``accelerator_type`` is named, else what ``ray_actor_options`` asks (0 by default)."""
        tp = int(self.engine_kwargs.get("tensor_parallel_size", 1))
        pp = int(self.engine_kwargs.get("pipeline_parallel_size", 1))
        if tp * pp > 1 or self.accelerator_type is not None:
            return tp * pp
        return int(self.deployment_config.get("ray_actor_options", {}).get("num_gpus", 0))

    def deployment_options(self) -> dict[str, Any]:
        """Options for the LLM server deployment: ``deployment_config`` with the replica's GPUs and
        accelerator type folded into ``ray_actor_options``."""
        options = {k: v for k, v in self.deployment_config.items() if k != "name"}
        actor = dict(options.get("ray_actor_options") or {})
        gpus = self.num_gpus()
        if gpus:
            actor["num_gpus"] = gpus
        if self.accelerator_type is not None:
            resources = dict(actor.get("resources") or {})
            resources[f"accelerator_type:{self.accelerator_type}"] = 0.001
            actor["resources"] = resources
        if self.runtime_env is not None:
            actor["runtime_env"] = self.runtime_env
        if actor:
            options["ray_actor_options"] = actor
        return options

    @property
    def tool_call_parser(self) -> str | None:
        """The format tool_choice 'auto' reads calls in (``engine_kwargs`` ``tool_call_parser`` where
        ``enable_auto_tool_choice`` is set), else None."""
        kwargs = self.engine_kwargs
        return kwargs.get("tool_call_parser") if kwargs.get("enable_auto_tool_choice") else None

    def _check_engine_kwargs(self) -> None:
        from muster.serve.llm.tools import PARSERS  # (tools imports the engine package, which imports this)

        kwargs = self.engine_kwargs
        parser = kwargs.get("tool_call_parser")
        if parser is not None and parser not in PARSERS:
            raise LLMConfigError(f"engine_kwargs['tool_call_parser']={parser!r}: this server reads "
                                 f"{sorted(PARSERS)} (vLLM's names for those formats).")
        if kwargs.get("enable_auto_tool_choice") and parser is None:
            raise LLMConfigError("engine_kwargs enable_auto_tool_choice=True needs tool_call_parser, the model's "
                                 f"tool-call format: one of {sorted(PARSERS)}.")
        for key in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs",
                    "max_waiting_requests", "num_blocks", "page_size"):
            value = kwargs.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise LLMConfigError(f"engine_kwargs[{key!r}]={value!r} must be a positive integer.")
        if self.resolved_engine() == "transformers":
            unknown = set(kwargs) - set(TRANSFORMERS_ENGINE_KWARGS)
            if unknown:
                known = "\n".join(f"  {k}: {v}" for k, v in TRANSFORMERS_ENGINE_KWARGS.items())
                raise LLMConfigError(
                    f"engine_kwargs {sorted(unknown)} are not understood by the transformers engine of model "
                    f"{self.model_id!r}. It takes:\n{known}\nFor vLLM's own arguments install vLLM "
                    "(pip install \"muster[vllm]\") and set llm_engine='vllm'."
                )
            dtype = kwargs.get("dtype", "auto")
            if dtype not in ("auto", "float32", "float16", "bfloat16"):
                raise LLMConfigError(
                    f"engine_kwargs['dtype']={dtype!r}: use 'auto', 'float32', 'float16' or 'bfloat16'."
                )
            share = kwargs.get("gpu_memory_utilization")
            if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                      or not 0 < share <= 1):
                raise LLMConfigError(f"engine_kwargs['gpu_memory_utilization']={share!r}: use a fraction in (0, 1].")
            task = kwargs.get("task", "auto")
            if task not in TASKS:
                raise LLMConfigError(f"engine_kwargs['task']={task!r}: the transformers engine takes 'generate' "
                                     "(or 'auto', the default) or 'embed' (a model that answers /v1/embeddings).")
            device = kwargs.get("device", "auto")
            if device not in ("auto", "cpu", "cuda"):
                raise LLMConfigError(f"engine_kwargs['device']={device!r}: use 'auto', 'cpu' or 'cuda'.")
        elif self.llm_engine == "vllm" and importlib.util.find_spec("vllm") is None:
            raise LLMConfigError(
                f"llm_engine='vllm' for model {self.model_id!r}, but vLLM is not installed: "
                "pip install \"muster[vllm]\" (or leave llm_engine='auto' to use transformers)."
            )

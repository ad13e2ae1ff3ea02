"""``build_openai_app``: the OpenAI ingress and one ``LLMServer`` deployment per model, as a Serve app."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muster.serve.llm.config import LLMConfig
from muster.serve.llm.engine.hf import DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_WAITING
from muster.serve.llm.errors import LLMConfigError
from muster.serve.llm.openai_app import OpenAIRouter, _check_unique, deployment_name, model_card
from muster.serve.llm.server import LLMServer

# The ingress only forwards; it should never be what limits concurrency or holds a CPU.
INGRESS_OPTIONS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}


@dataclass(kw_only=True)
class LLMServingArgs:
    """What ``build_openai_app`` takes (as this dataclass or a dict with these keys).

    Attributes:
        llm_configs: the models, each an ``LLMConfig``, a dict of its fields, or the path of a
            YAML/JSON file holding one.
        ingress_deployment_config: options for the ingress deployment (``num_replicas``, ...).
    """

    llm_configs: list[LLMConfig | dict[str, Any] | str]
    ingress_deployment_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.llm_configs, (list, tuple)) or not self.llm_configs:
            raise LLMConfigError(
                f"llm_configs={self.llm_configs!r} must be a non-empty list of LLMConfig (or dicts / config files)."
            )
        self.llm_configs = [_as_config(c) for c in self.llm_configs]
        _check_unique(self.configs)

    @property
    def configs(self) -> list[LLMConfig]:
        return [c for c in self.llm_configs if isinstance(c, LLMConfig)]


def _as_config(value: LLMConfig | dict[str, Any] | str) -> LLMConfig:
    if isinstance(value, LLMConfig):
        return value
    if isinstance(value, dict):
        return LLMConfig(**value)
    if isinstance(value, (str, Path)):
        import yaml

        try:
            data = yaml.safe_load(Path(value).read_text())
        except OSError as exc:
            raise LLMConfigError(f"llm_configs entry {value!r}: cannot read that config file: {exc}") from None
        return LLMConfig(**data)
    raise LLMConfigError(f"llm_configs entry {value!r} must be an LLMConfig, a dict of its fields, or a file path.")


class OpenAiIngress:
    """The Serve ingress of an OpenAI app: routes ``/v1`` requests to each model's ``LLMServer``.

    Args:
        llm_configs: the served models (for ``/v1/models``).
        llm_servers: one deployment handle per model, in the same order.
    """

    def __init__(self, llm_configs: Sequence[LLMConfig], llm_servers: Sequence[Any]):
        created = int(time.time())
        cards = {c.model_id: model_card(c, created) for c in llm_configs}
        callers = {c.model_id: _stream_caller(h) for c, h in zip(llm_configs, llm_servers)}
        self.router = OpenAIRouter(cards, callers)

    async def __call__(self, request: Any) -> Any:
        return await self.router(request)


class LLMIngressServer(LLMServer):
    """A model's ``LLMServer`` that also answers HTTP itself: the whole app when it serves one model.

    The OpenAI routes then run in the replica that holds the engine, so a request
    crosses one process hop (Serve's HTTP ingress -> this replica) instead of two
    (-> ``OpenAiIngress`` -> ``LLMServer``), which is most of what Serve adds to the
    time to first token on a busy machine.
    """

    def __init__(self, llm_config: LLMConfig | dict[str, Any]):
        super().__init__(llm_config)
        self.router = OpenAIRouter({self.model_id: self.model_card()}, {self.model_id: self.handle})

    async def __call__(self, request: Any) -> Any:
        return await self.router(request)


def _stream_caller(handle: Any) -> Any:
    streaming = handle.options(stream=True)

    def call(route: str, body: Any) -> AsyncIterator[Any]:
        return streaming.handle.remote(route, body)

    return call


def build_llm_deployment(llm_config: LLMConfig | dict[str, Any], server_cls: type[LLMServer] = LLMServer) -> Any:
    """One model's ``LLMServer`` as a bound Serve deployment (its resources from the config).

    Args:
        llm_config: the model.
        server_cls: ``LLMServer``, or a subclass of it (``LLMIngressServer`` for an app of one model).
    """
    from muster import serve

    config = _as_config(llm_config)
    options = config.deployment_options()
    kw = config.engine_kwargs
    options.setdefault("max_ongoing_requests", int(kw.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS))
                       + int(kw.get("max_waiting_requests", DEFAULT_MAX_WAITING)))
    if "autoscaling_config" in options and "num_replicas" not in options:
        options["num_replicas"] = "auto"
    name = config.deployment_config.get("name") or deployment_name(config.model_id)
    return serve.deployment(server_cls, name=name, **options).bind(config)


def build_openai_app(llm_serving_args: LLMServingArgs | dict[str, Any]) -> Any:
    """A Serve app answering OpenAI's ``/v1`` routes for every model in ``llm_configs``.

    ``serve.run(build_openai_app({"llm_configs": [config]}))`` starts it;
    requests are routed by their ``model`` field. Several models get an
    ``OpenAiIngress`` deployment in front of their ``LLMServer`` deployments; one
    model (and no ``ingress_deployment_config``) is served by its ``LLMServer``
    deployment alone, which answers HTTP itself (one hop fewer per request).

    Args:
        llm_serving_args: an :class:`LLMServingArgs` or ``{"llm_configs": [...]}``.

    Returns:
        A bound application for ``serve.run`` or ``muster serve run module:app``.

    Raises:
        LLMConfigError: a config is malformed or two configs share a model id.
    """
    from muster import serve

    args = llm_serving_args if isinstance(llm_serving_args, LLMServingArgs) else LLMServingArgs(**llm_serving_args)
    if len(args.configs) == 1 and not args.ingress_deployment_config:
        return build_llm_deployment(args.configs[0], LLMIngressServer)
    servers = [build_llm_deployment(c) for c in args.configs]
    options = {**INGRESS_OPTIONS, **args.ingress_deployment_config}
    return serve.deployment(OpenAiIngress, **options).bind(args.configs, servers)

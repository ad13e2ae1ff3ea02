"""From a bound application graph to the deployments that make it up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.serve.config import DeploymentConfig
from muster.serve.deployment import Application
from muster.serve.handle import DeploymentHandle


@dataclass
class DeploymentPlan:
    """One deployment of an app, with its constructor arguments (nested apps already handles)."""

    name: str
    target: Any
    args: tuple
    kwargs: dict
    config: DeploymentConfig


def build(app: Application, app_name: str) -> tuple[str, list[DeploymentPlan]]:
    """``(ingress deployment name, every deployment)`` of ``app``; dependencies come first.

    Raises:
        TypeError: ``app`` is not a bound deployment.
    """
    if not isinstance(app, Application):
        hint = " (call .bind() on the deployment)" if hasattr(app, "bind") else ""
        raise TypeError(f"serve.run needs a bound application such as MyDeployment.bind(), got {app!r}{hint}.")
    plans: list[DeploymentPlan] = []
    names: dict[int, str] = {}
    taken: set[str] = set()

    def visit(node: Application) -> str:
        if id(node) in names:
            return names[id(node)]
        name = node.deployment.name
        i = 1
        while name in taken:
            name, i = f"{node.deployment.name}_{i}", i + 1
        taken.add(name)
        names[id(node)] = name

        def sub(v: Any) -> Any:
            if isinstance(v, Application):
                return DeploymentHandle(visit(v), app_name)
            if isinstance(v, list):
                return [sub(x) for x in v]
            if isinstance(v, tuple):
                return tuple(sub(x) for x in v)
            if isinstance(v, dict):
                return {k: sub(x) for k, x in v.items()}
            return v

        args = tuple(sub(a) for a in node.args)
        kwargs = {k: sub(v) for k, v in node.kwargs.items()}
        config = node.deployment.config if name == node.deployment.name else node.deployment.config.replace(name=name)
        plans.append(DeploymentPlan(name, node.deployment.func_or_class, args, kwargs, config))
        return name

    return visit(app), plans

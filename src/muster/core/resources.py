"""Pure resource arithmetic shared by the engines: no processes, no I/O."""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from muster.exceptions import InvalidArgumentError

Resources = dict[str, float]


def normalize(resources: Mapping[str, float] | None, *, what: str = "resources",
              spelled: Mapping[str, str] | None = None) -> Resources:
    """Validate a resource request and drop zero entries.

    Args:
        what: the API the request came from, as the user wrote it (``"muster.init"``).
        spelled: how that API spells a resource, where not as a ``resources`` key
            (``{"CPU": "num_cpus"}``): an error names the argument the user gave.

    Raises:
        InvalidArgumentError: a name is not a string or an amount is negative / not a number.
    """
    out: Resources = {}
    for name, amount in (resources or {}).items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{what}: resource names must be non-empty strings, got {name!r}.")
        spelling = (spelled or {}).get(name)
        given = f"{what}: {spelling}={amount!r}" if spelling else f"{what}[{name!r}] = {amount!r}"
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or math.isnan(amount) or amount < 0:
            raise InvalidArgumentError(f"{given}: amounts must be numbers >= 0.")
        if name == "GPU" and amount > 1 and amount != int(amount):
            raise InvalidArgumentError(
                f"{given}: ask for a whole number of GPUs, or a fraction below 1 to share one."
            )
        if amount:
            out[name] = float(amount)
    return out


#: how ``num_cpus=``/``num_gpus=`` arguments name the two built-in resources (for ``normalize``'s errors)
ARGUMENT_NAMES = {"CPU": "num_cpus", "GPU": "num_gpus"}


def summed(parts: Iterable[Mapping[str, float]]) -> Resources:
    """The amounts of ``parts`` added up, name by name (bundles together, nodes together)."""
    out: Resources = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def fits(request: Mapping[str, float], free: Mapping[str, float]) -> bool:
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in request.items())


def shortfall(request: Mapping[str, float], have: Mapping[str, float],
              count: int = 1) -> dict[str, tuple[float, float]]:
    """``{name: (needed, have)}`` for every resource ``count`` copies of ``request`` lack."""
    return {
        k: (v * count, have.get(k, 0.0))
        for k, v in request.items()
        if have.get(k, 0.0) + 1e-9 < v * count
    }


def fmt(resources: Mapping[str, float]) -> str:
    """``{'CPU': 2.0}`` -> ``CPU=2``; stable order, integers without ``.0``."""
    if not resources:
        return "nothing"
    parts = []
    for k in sorted(resources):
        v = resources[k]
        parts.append(f"{k}={int(v) if float(v).is_integer() else round(v, 3)}")
    return ", ".join(parts)


TRAIN_KNOB = "ScalingConfig(num_workers=..., resources_per_worker={...})"
_TRAIN_NO_GPU_FIX = "set ScalingConfig(use_gpu=False), with no 'GPU' in its resources_per_worker"
OPTIONS_KNOB = "num_cpus= / num_gpus= in @muster.remote(...) or .options(...)"
NO_GPU_OPTION_FIX = ("drop num_gpus= (or pass num_gpus=0) to run it on the CPU, or run it where muster sees a GPU "
                     "(CUDA_VISIBLE_DEVICES, muster.init(num_gpus=N))")


def ensure_feasible(request: Mapping[str, float], count: int, total: Mapping[str, float], what: str = "",
                    knob: str = TRAIN_KNOB, no_gpu_fix: str = _TRAIN_NO_GPU_FIX) -> None:
    """Raise ``ResourcesUnavailableError`` at once if ``count`` x ``request`` can never fit in ``total``.

    The message names what was asked, what exists, and how to fix it in the caller's own words: ``knob`` is
    where the caller asks for resources (a deployment's ``ray_actor_options``, a task's ``num_cpus=``...), and
    ``no_gpu_fix`` how to ask for no GPU, on a machine that has none.
    """
    from muster.exceptions import ResourcesUnavailableError

    missing = shortfall(request, total, count)
    gpu = request.get("GPU", 0.0)
    if not missing and 0 < gpu < 1:
        per_gpu = int(1 / gpu + 1e-9)
        if per_gpu * int(total.get("GPU", 0)) < count:
            missing = {"GPU": (count * gpu, total.get("GPU", 0.0))}
    if not missing:
        return
    asked = ", ".join(f"{k}={_n(need)}" for k, (need, _) in missing.items())
    have = ", ".join(f"{k}={_n(h)}" for k, (_, h) in missing.items())
    in_all = " in all" if count > 1 else ""
    hints = []
    if "GPU" in missing and total.get("GPU", 0) == 0:
        hints.append(f"this machine has no GPU visible to muster: {no_gpu_fix}")
    elif "GPU" in missing:
        hints.append(f"ask for at most {_count(total.get('GPU', 0), 'GPU')}{in_all} with {knob}")
    if "CPU" in missing:
        hints.append(f"ask for at most {_count(total.get('CPU', 0), 'CPU')}{in_all} with {knob}, or tell muster to "
                     "oversubscribe with muster.init(num_cpus=N)")
    nodes = [k for k in missing if k.startswith("node:")]
    unknown = [k for k in nodes if not total.get(k)]
    if unknown:
        have_nodes = sorted(k for k in total if k.startswith("node:")) or ["none"]
        hints.append(f"{', '.join(unknown)} names no node (the nodes have {', '.join(have_nodes)}); ask for one of "
                     "theirs: node:<an IP of muster.nodes()>, or node:__internal_head__ for the head node")
    if len(unknown) < len(nodes):
        hints.append("ask for a share of at most 1 of a node: resource (each node has one unit of its own)")
    other = [k for k in missing if k not in ("CPU", "GPU") and not k.startswith("node:")]
    if other:
        hints.append(f"declare {', '.join(other)} with muster.init(resources={{...}})")
    subject = f"{what}: " if what else ""
    raise ResourcesUnavailableError(
        f"{subject}cannot ever schedule {count} x {{{fmt(request)}}}: that needs {asked}, but this machine has "
        f"{have} in total ({fmt(machine(total))}). Fix: {'; '.join(hints)}.",
        requested={k: v * count for k, v in request.items()},
        total=dict(total),
    )


def machine(total: Mapping[str, float]) -> dict[str, float]:
    """``total`` as a message shows it: without the ``node:`` entries Ray gives each node (one unit of
    ``node:<its IP>``, and ``node:__internal_head__`` on the head), which work asks for only to pick a node."""
    return {k: v for k, v in total.items() if not k.startswith("node:")}


def _n(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _count(v: float, unit: str) -> str:
    """``1 GPU``, ``2 GPUs``, ``0.5 GPU``."""
    return f"{_n(v)} {unit}{'s' if v > 1 else ''}"


def bundle_misfit(bundles: list[Resources], request: Mapping[str, float], index: int, what: str) -> str:
    """Empty if ``request`` fits bundle ``index`` (-1: some bundle) of a placement group of
    ``bundles``; else a sentence saying it never will, naming the bundle(s) and the request."""
    if any(fits(request, b) for b in (bundles if index < 0 else [bundles[index]])):
        return ""
    where = (f"any of its bundles ({'; '.join('{' + fmt(b) + '}' for b in bundles)})" if index < 0
             else f"its bundle {index} ({{{fmt(bundles[index])}}})")
    return (f"{what} asks for {{{fmt(request)}}}, which never fits in {where}: work scheduled into a "
            "placement group draws only on its bundle. Ask for less, or make the group's bundles bigger.")

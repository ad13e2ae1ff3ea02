"""Ray's node labels and label selectors (``label_selector=``, ``bundle_label_selector=``) on muster's engines.

The embedded engine's one node has the label Ray gives every node, ``ray.io/node-id`` (its id). A selector is
a dict from a label to a value, ``!value``, ``in(a, b)`` or ``!in(a, b)``, as in Ray. On the embedded engine a
selector the node satisfies changes nothing (the work runs there, as Ray would run it), and one it does not is
refused at once: Ray would leave the work pending forever. On a Ray cluster muster does not hand selectors to
Ray's scheduler, so there a selector is refused too, naming what places work on chosen nodes instead.
"""

from __future__ import annotations

import re
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError

NODE_ID_LABEL = "ray.io/node-id"
_IN = re.compile(r"^in\((.*)\)$")


def node_labels() -> dict[str, str]:
    """The labels of the embedded engine's node (Ray's default ones that hold on one machine)."""
    from muster.tasks.runtime_context import node_id

    return {NODE_ID_LABEL: node_id()}


def holds(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies ``selector``."""
    for key, wanted in selector.items():
        negated = wanted.startswith("!")
        body = wanted[1:] if negated else wanted
        found = _IN.match(body)
        values = {v.strip() for v in found.group(1).split(",")} if found else {body}
        if (labels.get(key) in values) == negated:
            return False
    return True


def check_selector(selector: Any, what: str, option: str = "label_selector") -> None:
    """Refuse ``selector`` (``option=`` of ``what``) unless the engine's node satisfies it; None passes.

    Raises:
        InvalidTypeError: not a dict of strings to strings.
        InvalidArgumentError: on a Ray cluster, or where the embedded engine's node does not satisfy it.
    """
    if selector is None or selector == {}:
        return
    if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in selector.items()):
        raise InvalidTypeError(f"{what}: {option}={selector!r}; pass a dict of label to value, e.g. "
                               f"{{'{NODE_ID_LABEL}': '<node id>'}}.")
    from muster.core import api

    if api.is_initialized() and api.get_runtime().name == "ray":
        raise InvalidArgumentError(
            f"{what}: {option}={selector!r} is not handed to Ray's scheduler by muster. Leave it out, and place "
            "the work with resources= (a custom resource the chosen nodes have) or "
            "scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False).")
    labels = node_labels()
    if not holds(selector, labels):
        raise InvalidArgumentError(
            f"{what}: {option}={selector!r} matches no node: the engine's one node has the labels {labels}, so "
            "the work could never start. Leave it out, or select labels the node has.")

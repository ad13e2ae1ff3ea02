"""Ray's ``ray.tune.execution.placement_groups`` import path of :class:`PlacementGroupFactory`
(also ``muster.tune.PlacementGroupFactory``), for ``tune.with_resources`` and a trainable's
``default_resource_request``."""

from muster.tune.tune_config import PlacementGroupFactory

__all__ = ["PlacementGroupFactory"]

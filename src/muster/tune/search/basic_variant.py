"""Ray's ``ray.tune.search.basic_variant`` path to ``BasicVariantGenerator`` (grid and random search)."""

from muster.tune.search.variant_generator import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]

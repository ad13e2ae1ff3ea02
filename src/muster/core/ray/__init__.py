"""The Ray engine: muster's runtime seam on an existing Ray cluster (``pip install "muster[ray]"``)."""

from muster.core.ray.engine import RayRuntime

__all__ = ["RayRuntime"]

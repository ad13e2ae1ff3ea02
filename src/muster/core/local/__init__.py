"""The embedded engine: a zygote process forks workers that already have torch imported."""

from muster.core.local.engine import LocalRuntime

__all__ = ["LocalRuntime"]

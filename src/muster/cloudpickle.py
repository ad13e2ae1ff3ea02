"""``muster.cloudpickle``: the cloudpickle muster serializes with, as ``ray.cloudpickle`` is Ray's.

Functions and classes of ``__main__`` (and lambdas, closures) pickle by value: ``dumps`` and
``loads`` round-trip what plain ``pickle`` refuses. A ported ``import ray.cloudpickle as pickle``
keeps working.
"""

from __future__ import annotations

from cloudpickle import CloudPickler, Pickler, dump, dumps, load, loads, register_pickle_by_value

__all__ = ["CloudPickler", "Pickler", "dump", "dumps", "load", "loads", "register_pickle_by_value"]

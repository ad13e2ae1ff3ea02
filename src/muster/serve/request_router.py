"""Ray's ``ray.serve.request_router`` (custom request routers): muster routes with its own fixed policy.

Every replica of a deployment is picked by power of two choices over the
requests it has in flight (see ``_internal/router.py``), a request naming a
multiplexed model first among the replicas that hold it (``_internal/model_routing.py``,
as Ray's ``MultiplexMixin``); there is no plug-in
point, so each of Ray's names here fails naming what to do instead.
"""

from __future__ import annotations


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.request_router", name)

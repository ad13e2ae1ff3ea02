"""Ray Train V2's ``ray.train.collective``: ``barrier`` and ``broadcast_from_rank_zero``.

Call them inside ``train_loop_per_worker``, on every rank, in the same order. They
go through the key-value store that rank 0 serves on ``MASTER_ADDR:MASTER_PORT``
(torch's ``TCPStore``, the one the process group's rendezvous uses), never through
the process group: they work with any backend (gloo or NCCL), before or after
``init_process_group``/``destroy_process_group``, and never mix with your own
collectives. Each call is a few store round trips, meant for small control data
(a run id, a path, a flag); send tensors with ``torch.distributed``.
"""

from __future__ import annotations

import datetime
import os
import pickle
from typing import Any, TypeVar

from muster.exceptions import InvalidArgumentError
from muster.train._internal import session as _session

T = TypeVar("T")

#: Ray's cap on what ``broadcast_from_rank_zero`` sends (pickled bytes); muster sends up to this much
MAX_BROADCAST_BYTES = 1 << 20

_DEFAULT_TIMEOUT_S = 1800.0  # TorchConfig's default: how long a rank waits at a barrier for the others

_state: dict[str, Any] = {}  # this process's store client and call count (one process hosts one rank)


def barrier() -> None:
    """Wait until every rank of the run has called ``barrier()`` (Ray's ``ray.train.collective.barrier``)."""
    _sync("barrier", None)


def broadcast_from_rank_zero(data: T) -> T:
    """Every rank gets rank 0's ``data`` (what other ranks pass is ignored); a barrier too.

    ``data`` must pickle; Ray takes up to 1 KB of it, muster up to 1 MiB (``MAX_BROADCAST_BYTES``).

    Raises:
        InvalidArgumentError: on rank 0, ``data`` pickles to more than ``MAX_BROADCAST_BYTES``.
    """
    return _sync("broadcast_from_rank_zero", data)  # type: ignore[no-any-return]


def _sync(api: str, data: Any) -> Any:
    context = _session.get_session(f"collective.{api}").context
    rank, size = context.world_rank, context.world_size
    payload = b""
    if api == "broadcast_from_rank_zero" and rank == 0:
        payload = pickle.dumps(data)
        if len(payload) > MAX_BROADCAST_BYTES:
            raise InvalidArgumentError(
                f"broadcast_from_rank_zero(data): data of type {type(data).__name__} pickles to {len(payload)} "
                f"bytes, more than muster's limit of {MAX_BROADCAST_BYTES} (Ray's is 1000). Broadcast a path or "
                "a key instead and have each rank read the data, or send tensors with torch.distributed."
            )
    if size == 1:
        return data
    store = _store(rank, context.run_dir, context.attempt)
    index = _state["calls"] = _state["calls"] + 1
    key = f"muster/train/collective/{context.attempt}/{index}"
    # Each rank says which call it is in: two ranks in different calls (a barrier on one, a broadcast on
    # the other) would otherwise pair up silently.
    store.set(f"{key}/api/{rank}", api.encode())
    if rank == 0 and api == "broadcast_from_rank_zero":
        store.set(f"{key}/data", payload)
    if store.add(f"{key}/arrived", 1) == size:
        store.set(f"{key}/open", b"1")
    store.wait([f"{key}/open"])
    if rank != 0:
        first = store.get(f"{key}/api/0").decode()
        if first != api:
            raise InvalidArgumentError(
                f"collective call #{index} is {api}() on rank {rank} but {first}() on rank 0: every rank must "
                "call muster.train.collective's functions in the same order. Make the calls unconditional "
                "(not inside `if rank == 0:`)."
            )
    if api == "broadcast_from_rank_zero":
        return data if rank == 0 else pickle.loads(store.get(f"{key}/data"))
    return None


def _store(rank: int, run_dir: str, attempt: int) -> Any:
    """This process's client of rank 0's store (rank 0 shares the server it already runs, or starts it);
    a new client, and a new call count, for each attempt of each run the process hosts."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    where = (host, port, run_dir, attempt)
    if _state.get("where") == where:
        return _state["store"]
    import torch.distributed as dist

    if not host or not port:
        raise RuntimeError(
            "muster.train.collective needs MASTER_ADDR and MASTER_PORT, which the trainer sets in each worker; "
            f"this worker has MASTER_ADDR={host!r}, MASTER_PORT={port!r}. Do not unset them in the training "
            "function."
        )
    timeout = datetime.timedelta(seconds=_DEFAULT_TIMEOUT_S)
    if rank == 0:  # multi_tenant: the rendezvous's server on this port, when it runs, is shared, not rebound
        store = dist.TCPStore(host, int(port), is_master=True, wait_for_workers=False, multi_tenant=True,
                              timeout=timeout)
    else:
        store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    _state.update(where=where, store=store, calls=0)
    return store

"""What a framework backend does on each worker around the user's loop."""

from __future__ import annotations

from muster.train.context import TrainContext


class Backend:
    """Base backend: nothing to set up. Subclasses (``TorchConfig``) override the hooks."""

    def check_placement(self, placements: list[tuple[int, str, list[int]]]) -> None:  # noqa: B027
        """Called in the driver once the gang is placed, before any worker starts its loop:
        ``(rank, node, gpu_ids)`` per worker.  Raise to refuse a placement the backend cannot use."""

    def on_worker_start(self, context: TrainContext) -> None:  # noqa: B027 - a no-op by design
        """Called in every worker before the user's loop (after env vars are set)."""

    def on_worker_end(self) -> None:  # noqa: B027
        """Called in every worker after the loop returns or raises."""

    def on_driver_start(self) -> None:  # noqa: B027
        """Local mode (``num_workers=0``): called in the driver before the user's loop runs there (no
        process group is joined)."""

    def on_driver_end(self) -> None:  # noqa: B027
        """Local mode: called in the driver after the loop returns or raises."""

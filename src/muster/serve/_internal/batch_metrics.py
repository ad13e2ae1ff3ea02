"""Ray Serve 2.60's ``@serve.batch`` metrics, tagged ``function_name`` (the batched function's ``__name__``).

Recorded as ``serve.metrics`` series, so in a replica they carry its ``deployment``/``replica``/``application``
tags and reach ``serve.status()`` (``custom_metrics``), the run store and the dashboard's Prometheus ``/metrics``
(as ``ray_serve_batches_processed_total``, ...), as Ray's reach its metrics agent:

- ``serve_batch_wait_time_ms`` (histogram): how long a batch stayed open for items after its first one.
- ``serve_batch_execution_time_ms`` (histogram): how long the batched function ran.
- ``serve_batch_queue_length`` (gauge): calls waiting in the batch queue while a batch is filled.
- ``serve_batch_utilization_percent`` (histogram): the batch's size over ``max_batch_size``, in percent.
- ``serve_actual_batch_size`` (histogram): the batch's size (``batch_size_fn``'s count when one is set).
- ``serve_batches_processed`` (counter): batches run (one per multiplexed model a batch is split into).
"""

from __future__ import annotations

from muster.serve import metrics

#: Ray's default buckets (``RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS``, ``..._BATCH_UTILIZATION_...``, ``..._SIZE_...``)
LATENCY_BUCKETS_MS: list[float] = [1, 2, 5, 10, 20, 50, 100, 200, 300, 400, 500, 1000, 2000, 5000, 10000, 60000,
                                   120000, 300000, 600000]
UTILIZATION_BUCKETS_PERCENT: list[float] = [5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 100]
SIZE_BUCKETS: list[float] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
_KEYS = ("function_name",)


class BatchMetrics:
    """One batched function's metrics; made where its batches run (in the replica, so with its tags)."""

    def __init__(self, function_name: str):
        self.tags = {"function_name": function_name}
        self.wait_ms = metrics.Histogram("serve_batch_wait_time_ms", "How long a batch took items after its first "
                                         "(ms).", LATENCY_BUCKETS_MS, _KEYS)
        self.execution_ms = metrics.Histogram("serve_batch_execution_time_ms", "How long the batched function ran "
                                              "(ms).", LATENCY_BUCKETS_MS, _KEYS)
        self.queue_length = metrics.Gauge("serve_batch_queue_length", "Calls waiting in the batch queue.", _KEYS)
        self.utilization = metrics.Histogram("serve_batch_utilization_percent", "A batch's size over max_batch_size, "
                                             "in percent.", UTILIZATION_BUCKETS_PERCENT, _KEYS)
        self.size = metrics.Histogram("serve_actual_batch_size", "The size of each batch run.", SIZE_BUCKETS, _KEYS)
        self.processed = metrics.Counter("serve_batches_processed", "Batches run.", _KEYS)

    def filling(self, queued: int) -> None:
        """The calls waiting in the queue, seen while a batch fills."""
        self.queue_length.set(queued, self.tags)

    def closed(self, waited_s: float) -> None:
        """A batch stopped taking items ``waited_s`` after its first one."""
        self.wait_ms.observe(waited_s * 1000, self.tags)

    def started(self, size: int, max_batch_size: int) -> None:
        """A batch of ``size`` (as ``batch_size_fn`` counts) starts running."""
        self.utilization.observe(size / max_batch_size * 100, self.tags)
        self.size.observe(size, self.tags)
        self.processed.inc(1, self.tags)

    def ran(self, took_s: float) -> None:
        """The batched function ran for ``took_s`` (returned, raised, or its generator ended)."""
        self.execution_ms.observe(took_s * 1000, self.tags)

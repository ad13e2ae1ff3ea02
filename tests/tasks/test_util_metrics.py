"""``muster.util.metrics`` (Ray's ``ray.util.metrics``): its validation, as Ray's, in the driver and in a real actor,
and the Prometheus text its series export as."""

from __future__ import annotations

import pytest
from _shared import check_in_fork

import muster
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.observe import prometheus
from muster.util import metrics


def _series(name: str) -> list[dict]:
    return [s for s in metrics.REGISTRY.snapshot() if s["name"] == name]


def test_inputs_are_validated_as_rays_are():
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        metrics.Counter("")
    with pytest.warns(UserWarning, match=r"Invalid metric name '1bad'.*discarded"):
        bad = metrics.Counter("1bad")
    bad.inc()  # discarded: records nothing, raises nothing (Ray's behaviour)
    assert _series("1bad") == []
    with pytest.raises(InvalidTypeError, match=r"tag_keys must be a tuple.*tag_keys=\('model',\)"):
        metrics.Gauge("g_list_keys", tag_keys=["model"])  # type: ignore[arg-type]
    c = metrics.Counter("v_requests", description="d", tag_keys=("model",))
    with pytest.raises(InvalidArgumentError, match=r"unrecognized tag key 'modle'.*tag_keys are \('model',\)"):
        c.set_default_tags({"modle": "a"})
    with pytest.raises(InvalidTypeError, match="tag values must be str, got int 3"):
        c.set_default_tags({"model": 3})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="missing value for tag key"):
        c.inc()
    with pytest.warns(UserWarning, match=r"tag key 'other' is not in its tag_keys \('model',\)"):
        c.inc(tags={"model": "x", "other": "b"})  # Ray records it (only set_default_tags refuses the key)
    assert [s["tags"] for s in _series("v_requests")] == [{"model": "x"}]  # the undeclared key is left out
    for bad_value in (0, -1.5):
        with pytest.raises(InvalidArgumentError, match=rf"increment must be > 0, got {bad_value}"):
            c.inc(bad_value, tags={"model": "a"})
    with pytest.raises(InvalidTypeError, match="value must be int or float, got str"):
        c.inc("1", tags={"model": "a"})  # type: ignore[arg-type]
    assert c.set_default_tags({"model": "a"}) is c and c.info["default_tags"] == {"model": "a"}
    c.inc()
    c.inc(2, tags={"model": "b"})
    assert sorted((s["tags"]["model"], s["value"]) for s in _series("v_requests")) == [
        ("a", 1.0), ("b", 2.0), ("x", 1.0)]
    with pytest.raises(InvalidArgumentError, match="needs boundaries"):
        metrics.Histogram("h_none")
    with pytest.raises(InvalidArgumentError, match=r"boundaries\[1\] = -2"):
        metrics.Histogram("h_neg", boundaries=[1, -2])
    with pytest.raises(InvalidArgumentError, match="already a counter"):
        metrics.Gauge("v_requests")
    g = metrics.Gauge("v_gauge")
    g.set(None)  # a no-op, as in Ray
    g.set(3)
    g.set(1.5)
    assert [s["value"] for s in _series("v_gauge")] == [1.5]


def test_merge_and_prometheus_text():
    a = [{"name": "hits", "kind": "counter", "description": "Hits.", "tags": {"k": "x"}, "value": 2.0},
         {"name": "lat", "kind": "histogram", "description": "", "tags": {}, "boundaries": [1.0, 10.0],
          "buckets": [1, 0, 1], "sum": 20.5, "count": 2},
         {"name": "temp", "kind": "gauge", "description": "", "tags": {}, "value": 5.0, "time": 1.0}]
    b = [{"name": "hits", "kind": "counter", "description": "Hits.", "tags": {"k": "x"}, "value": 3.0},
         {"name": "lat", "kind": "histogram", "description": "", "tags": {}, "boundaries": [1.0, 10.0],
          "buckets": [0, 1, 0], "sum": 4.0, "count": 1},
         {"name": "temp", "kind": "gauge", "description": "", "tags": {}, "value": 7.0, "time": 2.0}]
    merged = prometheus.merge([a, b])
    assert prometheus.render(merged) == (
        '# HELP ray_hits_total Hits.\n# TYPE ray_hits_total counter\nray_hits_total{k="x"} 5\n'
        '# HELP ray_lat \n# TYPE ray_lat histogram\nray_lat_bucket{le="1"} 1\nray_lat_bucket{le="10"} 2\n'
        'ray_lat_bucket{le="+Inf"} 3\nray_lat_sum 24.5\nray_lat_count 3\n'
        '# HELP ray_temp \n# TYPE ray_temp gauge\nray_temp 7\n')
    assert a[0]["value"] == 2.0 and a[1]["buckets"] == [1, 0, 1]  # the inputs are left as they were


def test_a_description_given_in_one_process_is_kept_when_another_declares_the_metric_bare():
    """A driver may declare ``Counter("jobs")`` that its workers declared with a description: the endpoint's
    HELP line is the description, whichever process's series comes first (it used to be the first one's)."""
    bare = {"name": "jobs", "kind": "counter", "description": "", "tags": {"kind": "driver"}, "value": 4.0}
    told = {"name": "jobs", "kind": "counter", "description": "Jobs done.", "tags": {"kind": "task"}, "value": 2.0}
    for order in ([bare, told], [told, bare]):
        assert prometheus.render(prometheus.merge([order])).startswith("# HELP ray_jobs_total Jobs done.\n")
    same_tags = {**told, "tags": {"kind": "driver"}}
    for snapshots in ([[bare], [same_tags]], [[same_tags], [bare]]):
        assert [(s["description"], s["value"]) for s in prometheus.merge(snapshots)] == [("Jobs done.", 6.0)]


def test_a_forked_child_starts_from_zero():
    """A worker forked from a process that recorded (the zygote from the driver) must not report the parent's
    values as its own: a replica would export them as its series."""
    parent = metrics.Counter("forked_calls")
    parent.inc(5)

    def child_sees_zero_then_counts() -> bool:
        if _series("forked_calls"):
            return False
        parent.inc(2)
        return [s["value"] for s in _series("forked_calls")] == [2.0]

    assert check_in_fork(child_sees_zero_then_counts) == "passed"
    assert [s["value"] for s in _series("forked_calls")] == [5.0]


@muster.remote
class _Meter:
    def __init__(self):
        from muster.util.metrics import Counter

        self.c = Counter("actor_calls", tag_keys=("kind",))

    def hit(self, value):
        self.c.inc(value, tags={"kind": "a"})
        from muster.util.metrics import REGISTRY

        return [s["value"] for s in REGISTRY.snapshot() if s["name"] == "actor_calls"]


def test_usable_in_an_actor_with_the_same_checks():
    meter = _Meter.remote()
    try:
        assert muster.get(meter.hit.remote(2)) == [2.0]
        assert muster.get(meter.hit.remote(1)) == [3.0]
        with pytest.raises(ValueError, match="increment must be > 0, got -1"):
            muster.get(meter.hit.remote(-1))
    finally:
        muster.kill(meter)

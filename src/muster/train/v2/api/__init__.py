"""``ray.train.v2.api`` -> ``muster.train.v2.api`` (re-exports of :mod:`muster.train`)."""

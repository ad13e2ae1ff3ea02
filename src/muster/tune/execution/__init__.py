"""Ray's ``ray.tune.execution``: only the import path of :class:`PlacementGroupFactory` (muster's
trial execution is :mod:`muster.tune.tune_controller`)."""

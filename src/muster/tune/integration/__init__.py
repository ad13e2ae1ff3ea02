"""Framework callbacks that report to Tune (Ray's ``ray.tune.integration``).

``muster.tune.integration.pytorch_lightning``: ``TuneReportCallback`` and
``TuneReportCheckpointCallback`` (needs ``pip install "muster[lightning]"``).
"""

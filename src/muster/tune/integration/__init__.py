"""Framework callbacks that report to Tune (Ray's ``ray.tune.integration``).

``muster.tune.integration.pytorch_lightning``: ``TuneReportCallback`` and
``TuneReportCheckpointCallback`` (needs ``pip install "muster[lightning]"``).
``muster.tune.integration.ray_train``: ``TuneReportCallback`` for a trainer fit inside a trial
(accepted; muster forwards the trainer's reports to the trial without it).
"""

"""``TuneReportCallback`` for a ``TorchTrainer`` run inside a Tune trial (Ray's
``ray.tune.integration.ray_train``).

Ray needs it in the trainer's ``RunConfig(callbacks=[...])`` to turn the
trainer's reports into the trial's results, each with ``checkpoint_path`` where
it saved a checkpoint.  muster does that for every trainer a trial fits (rank
0's reports become the trial's, ``checkpoint_path`` included), so the callback
keeps Ray scripts working and adds nothing.
"""

from __future__ import annotations

from muster.exceptions import MusterError


class TuneReportCallback:
    """Accepted in a trainer's ``RunConfig(callbacks=[...])`` inside a trial (the trial gets the
    trainer's reports without it); made outside a trial, it fails as Ray's does."""

    def __init__(self) -> None:
        from muster.tune import session

        if session._trial is None:
            raise MusterError(
                "TuneReportCallback() was made outside a Tune trial: it belongs in the RunConfig of a trainer "
                "that a trainable run by muster.tune.Tuner fits. Leave it out elsewhere."
            )

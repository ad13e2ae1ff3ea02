"""Tune callbacks (Ray's ``tune.Callback``): hooks the Tune controller calls as trials start, report and end.

Pass them as ``RunConfig(callbacks=[...])``.  Every hook runs on the
controller's thread, with Ray's keyword arguments; one that raises is reported
once as a warning and does not stop the experiment.
"""

from __future__ import annotations

import warnings
from typing import Any


class Callback:
    """Override any of these hooks. ``iteration`` counts the steps of the controller's loop (one
    step: start what fits, handle the results and ends that arrived, save the experiment state);
    ``trials`` is every trial; ``trial`` is a ``muster.tune.trial.Trial``.
    """

    def setup(self, **info: Any) -> None:
        """Before the first trial starts."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """At the start of each step of the controller's loop."""

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """At the end of each step of the controller's loop."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial (re)started; its folder (``trial.local_path``) exists."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        """A trial reported ``result``."""

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial committed a checkpoint (``on_checkpoint`` follows, with it)."""

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        """A trial committed ``checkpoint`` (a ``muster.train.Checkpoint`` in the trial's storage)."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial failed and restarts (``FailureConfig(max_failures=...)``)."""

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial's workers start from a checkpoint: a restart after a failure, a paused trial
        resumed, or a PBT exploit (another trial's checkpoint)."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial finished (or was stopped)."""

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial failed for good."""

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """After the last trial ended."""


class CallbackList:
    """Calls a hook on every callback that has it (train callbacks in the same list are skipped)."""

    def __init__(self, callbacks: list[Any] | None):
        self.callbacks = [c for c in callbacks or [] if isinstance(c, Callback)]
        self.iteration = 0
        self._broken: set[int] = set()

    def __call__(self, hook: str, **kwargs: Any) -> None:
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(**kwargs)
            except Exception as exc:  # noqa: BLE001 - a broken logger must not end the experiment
                if id(cb) not in self._broken:
                    self._broken.add(id(cb))
                    warnings.warn(f"Tune callback {type(cb).__name__}.{hook} raised {type(exc).__name__}: {exc}; "
                                  "the experiment goes on.", stacklevel=2)

    def trial_event(self, hook: str, trials: list[Any], trial: Any, **kwargs: Any) -> None:
        self(hook, iteration=self.iteration, trials=trials, trial=trial, **kwargs)

    def step_begin(self, trials: list[Any]) -> None:
        self("on_step_begin", iteration=self.iteration, trials=trials)

    def step_end(self, trials: list[Any]) -> None:
        self.iteration += 1
        self("on_step_end", iteration=self.iteration, trials=trials)

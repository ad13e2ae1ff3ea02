"""Tune callbacks (Ray's ``tune.Callback``): hooks the Tune controller calls as trials start, report and end.

Pass them as ``RunConfig(callbacks=[...])``.  Every hook runs on the
controller's thread, with Ray's keyword arguments; one that raises is reported
once as a warning and does not stop the experiment.
"""

from __future__ import annotations

import warnings
from typing import Any

import cloudpickle

CALLBACK_STATE = "callback-states-default.pkl"  # Ray's file name for it, in the experiment's folder


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

    def get_state(self) -> dict[str, Any] | None:
        """This callback's state, saved with the experiment's (it must pickle); None: nothing to save.
        ``Tuner.restore`` hands it to :meth:`set_state` of the callback at the same place in
        ``RunConfig(callbacks=[...])``, after ``setup``."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Take back the state :meth:`get_state` returned in the run being restored."""


class CallbackList:
    """Calls a hook on every callback that has it (train callbacks in the same list are skipped)."""

    def __init__(self, callbacks: list[Any] | None):
        self.callbacks = [c for c in callbacks or [] if isinstance(c, Callback)]
        self.iteration = 0
        self._broken: set[int] = set()
        self.restored: dict[int, Any] | None = None  # states of a run being restored, set after ``setup``

    def save_to(self, experiment: Any) -> None:
        """Keep the callbacks' states (by position) in the experiment's folder, when any has one."""
        states = {}
        for i, cb in enumerate(self.callbacks):
            try:
                state = cb.get_state()
            except Exception as exc:  # noqa: BLE001 - as a hook that raises: warned once, the run goes on
                self._warn(cb, "get_state", exc)
                continue
            if state:
                states[i] = state
        if states:
            experiment.write_bytes(experiment.join(experiment.run_dir, CALLBACK_STATE), cloudpickle.dumps(states))

    def load_from(self, experiment: Any) -> None:
        """Read the states a run being restored saved; :meth:`set_restored` hands them over."""
        path = experiment.join(experiment.run_dir, CALLBACK_STATE)
        if experiment.exists(path):
            self.restored = cloudpickle.loads(experiment.read_bytes(path))

    def set_restored(self) -> None:
        for i, state in (self.restored or {}).items():
            if i < len(self.callbacks):
                try:
                    self.callbacks[i].set_state(state)
                except Exception as exc:  # noqa: BLE001
                    self._warn(self.callbacks[i], "set_state", exc)
        self.restored = None

    def _warn(self, cb: Any, hook: str, exc: Exception) -> None:
        if id(cb) not in self._broken:
            self._broken.add(id(cb))
            warnings.warn(f"Tune callback {type(cb).__name__}.{hook} raised {type(exc).__name__}: {exc}; "
                          "the experiment goes on.", stacklevel=3)

    def __call__(self, hook: str, **kwargs: Any) -> None:
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(**kwargs)
            except Exception as exc:  # noqa: BLE001 - a broken logger must not end the experiment
                self._warn(cb, hook, exc)

    def trial_event(self, hook: str, trials: list[Any], trial: Any, **kwargs: Any) -> None:
        self(hook, iteration=self.iteration, trials=trials, trial=trial, **kwargs)

    def step_begin(self, trials: list[Any]) -> None:
        self("on_step_begin", iteration=self.iteration, trials=trials)

    def step_end(self, trials: list[Any]) -> None:
        self.iteration += 1
        self("on_step_end", iteration=self.iteration, trials=trials)

"""A Tune trial's loggers: the ``RunConfig(callbacks=...)`` that log a run's reports (CSV, JSON,
TensorBoard, MLflow, or any object with ``on_report``), driven by the Tune controller as Ray's
``LoggerCallback``s are.

Each trial's run gets copies of them (its own files in its folder, or its own MLflow run). The
trial's training run opens them (``on_run_start``) and hands them its checkpoints; every result
reaches them from the Tune controller, after its stopper and scheduler decided on it, so the
result a trial is stopped on is logged with ``done=True``, as Ray logs it. The controller closes
them when the trial ends: a paused trial's stay open until it runs again (closed then as paused)
or is ended without running again (closed then as completed: TensorBoard writes its hparams).

As Ray's Tune adds its default loggers unasked, each trial in local storage also gets a
``CSVLoggerCallback`` (``progress.csv``) and, where tensorboardX is installed and the driver has imported
torch, a ``TBXLoggerCallback``, unless ``RunConfig(callbacks=)`` holds one of that kind or
``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``. (tensorboardX imports torch: about a second in a driver without it,
and torch preloaded in every worker started afterwards.)
Ray's third default, its ``JsonLoggerCallback``, writes the ``result.json`` the trial's run already
records (muster's ``JsonLoggerCallback`` writes ``progress.json``: not added).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from typing import Any

#: the hooks the Tune controller calls itself; the trial's training run does not pass them on
_TUNE_DRIVEN = frozenset({"on_report", "on_run_end", "on_run_failed"})


def default_loggers(callbacks: list[Any] | None) -> list[Any]:
    """The loggers Ray's Tune adds to ``callbacks`` (its ``_create_default_callbacks``): a
    ``CSVLoggerCallback`` and, where tensorboardX is installed and the driver has imported torch (which
    tensorboardX imports), a ``TBXLoggerCallback``, each unless ``callbacks`` holds one of its kind; none under
    ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``, as in Ray."""
    from muster.observe.loggers import CSVLoggerCallback, TBXLoggerCallback

    # read here: core/settings.py, where muster reads its environment, has no Tune logger switch yet
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0") == "1":
        return []
    given = callbacks or []
    out: list[Any] = []
    if not any(isinstance(cb, CSVLoggerCallback) for cb in given):
        out.append(CSVLoggerCallback())
    # tensorboardX imports torch: a driver that has not (nor then its workers, which the engine starts from a
    # process without torch) is not made to, for a logger it did not ask for; TBXLoggerCallback() given adds it
    if (not any(isinstance(cb, TBXLoggerCallback) for cb in given) and "torch" in sys.modules
            and importlib.util.find_spec("tensorboardX")):
        out.append(TBXLoggerCallback())
    return out


def load_default_loggers(callbacks: list[Any] | None) -> None:
    """Import what :func:`default_loggers` will use on the calling (the driver's main) thread, before trials
    start: tensorboardX imports torch (about a second here), which the first trial's logger otherwise did on
    the Tune controller's thread, holding up every trial's results meanwhile."""
    from muster.observe.loggers import TBXLoggerCallback

    if any(isinstance(cb, TBXLoggerCallback) for cb in default_loggers(callbacks)):
        import tensorboardX  # noqa: F401


def run_loggers(callbacks: list[Any] | None, trial: Any, defaults: bool = False) -> list[Any]:
    """Copies, for one trial, of the ``RunConfig(callbacks=...)`` that log a training run's reports
    (``muster.observe.loggers``' CSV, JSON, TensorBoard and MLflow loggers, or any object with
    ``on_report``): as Ray's loggers do, each trial gets its own files (in its folder) or MLflow run.
    Tune's own callbacks (``tune.Callback``) are the controller's, not the trial's. ``defaults``: add
    Ray's default loggers (``default_loggers``) after them, as Ray does."""
    from muster.tune.callback import Callback

    out = []
    for cb in [*(callbacks or []), *(default_loggers(callbacks) if defaults else [])]:
        if isinstance(cb, Callback) or not hasattr(cb, "on_report"):
            continue
        out.append(cb.for_trial(trial.config, trial) if hasattr(cb, "for_trial") else copy.copy(cb))
    return out


class _RunSide:
    """A logger as the trial's training run sees it: every hook but those the Tune controller calls."""

    def __init__(self, logger: Any):
        self._logger = logger

    def __getattr__(self, name: str) -> Any:
        if name in _TUNE_DRIVEN:
            raise AttributeError(name)
        return getattr(self._logger, name)


class TrialLoggers:
    """One trial run's loggers. ``run_side()`` goes into the run's ``RunConfig(callbacks=)``;
    the Tune controller calls ``log`` with each result and ``end`` once, on its own thread.
    ``local``: the trial's folder is on this machine's disk, where Ray's default loggers (added then)
    write."""

    def __init__(self, callbacks: list[Any] | None, trial: Any, local: bool = False):
        self.loggers = run_loggers(callbacks, trial, defaults=local)
        self._ended = False

    def run_side(self) -> list[Any]:
        return [_RunSide(cb) for cb in self.loggers]

    def log(self, result: dict[str, Any]) -> None:
        if not self._ended:
            for cb in self.loggers:
                cb.on_report(result)

    def end(self, outcome: Any) -> None:
        """Close them once: ``on_run_failed(outcome)`` where the run failed (an exception),
        else ``on_run_end(outcome)`` (the run's ``Result``, or None)."""
        if self._ended:
            return
        self._ended = True
        failed = isinstance(outcome, BaseException)
        for cb in self.loggers:
            hook = getattr(cb, "on_run_failed" if failed else "on_run_end", None)
            if hook is not None:
                hook(outcome)

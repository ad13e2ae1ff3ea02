"""Ray Tune's progress reporters: ``RunConfig(progress_reporter=CLIReporter(...))``.

``CLIReporter`` (and ``JupyterNotebookReporter``) choose what muster's trial table shows: the
metric and parameter columns (a list, or a dict of name -> header), how many rows, how often it is
printed where the output is not a terminal, and whether the rows are sorted by the metric. A
``ProgressReporter`` subclass of the user's own replaces the table: muster calls its
``should_report(trials, done)`` on every refresh and, when that says so, ``report(trials, done,
*sys_info)``, once more with ``done=True`` at the end (as Ray does). The trials it gets have Ray's
``trial_id``, ``status``, ``config`` and ``last_result``.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence, Union

from muster.exceptions import InvalidArgumentError, InvalidTypeError

Columns = Optional[Union[Sequence[str], Mapping[str, str]]]


class ProgressReporter:
    """Ray's abstract reporter: subclass it and implement :meth:`should_report` and :meth:`report`."""

    def setup(self, start_time: Optional[float] = None, total_samples: Optional[int] = None,
              metric: Optional[str] = None, mode: Optional[str] = None, **kwargs: Any) -> None:
        """Called once before the run's first report (no-op by default)."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        raise NotImplementedError

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        raise NotImplementedError


def _columns(value: Columns, name: str) -> dict[str, str]:
    """A column choice as {key: header}."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) or not all(isinstance(c, str) for c in value):
        raise InvalidTypeError(f"{name}={value!r}: pass a list of names, or a dict of name -> column header.")
    return {c: c for c in value}


class TuneReporterBase(ProgressReporter):
    """What muster's trial table shows (Ray's base of the built-in reporters)."""

    def __init__(self, *, metric_columns: Columns = None, parameter_columns: Columns = None,
                 total_samples: Optional[int] = None, max_progress_rows: int = 20, max_error_rows: int = 20,
                 max_column_length: int = 20, max_report_frequency: float = 5, infer_limit: int = 3,
                 print_intermediate_tables: Optional[bool] = None, metric: Optional[str] = None,
                 mode: Optional[str] = None, sort_by_metric: bool = False):
        self.metric_columns = _columns(metric_columns, "metric_columns")
        self.parameter_columns = _columns(parameter_columns, "parameter_columns")
        if not isinstance(max_progress_rows, int) or max_progress_rows < 1:
            raise InvalidArgumentError(f"max_progress_rows={max_progress_rows!r}: pass a positive integer.")
        if mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"mode={mode!r}: use 'min' or 'max'.")
        self.max_progress_rows, self.max_report_frequency = max_progress_rows, float(max_report_frequency)
        self.max_column_length, self.infer_limit = max_column_length, infer_limit
        self.total_samples, self.max_error_rows = total_samples, max_error_rows
        self.print_intermediate_tables = print_intermediate_tables
        self.metric, self.mode, self.sort_by_metric = metric, mode, sort_by_metric

    def add_metric_column(self, metric: str, representation: Optional[str] = None) -> None:
        if metric in self.metric_columns:
            raise InvalidArgumentError(f"add_metric_column({metric!r}): it is a column already.")
        self.metric_columns[metric] = representation or metric

    def add_parameter_column(self, parameter: str, representation: Optional[str] = None) -> None:
        if parameter in self.parameter_columns:
            raise InvalidArgumentError(f"add_parameter_column({parameter!r}): it is a column already.")
        self.parameter_columns[parameter] = representation or parameter

    def set_search_properties(self, metric: Optional[str], mode: Optional[str]) -> bool:
        self.metric, self.mode = self.metric or metric, self.mode or mode
        return True

    def set_total_samples(self, total_samples: int) -> None:
        self.total_samples = total_samples

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        return True  # muster's table decides when it prints

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        pass  # muster's table does the printing, with this reporter's columns


class CLIReporter(TuneReporterBase):
    """The trial table on the console, with the columns and limits given (Ray's arguments)."""


class JupyterNotebookReporter(TuneReporterBase):
    """As :class:`CLIReporter` (muster's table renders in notebooks too); Ray's ``overwrite`` is accepted."""

    def __init__(self, *, overwrite: bool = True, **options: Any):
        super().__init__(**options)
        self.overwrite = overwrite


class UserReporter:
    """Drives a user's own ``ProgressReporter`` from muster's refreshes."""

    def __init__(self, reporter: ProgressReporter, metric: Optional[str], mode: Optional[str]):
        self.reporter = reporter
        reporter.setup(start_time=time.time(), metric=metric, mode=mode)

    def refresh(self, trials: list[Any], note: str, done: bool = False) -> None:
        if done or self.reporter.should_report(trials, done):
            self.reporter.report(trials, done, note)


def check(reporter: Any) -> Optional[ProgressReporter]:
    """``RunConfig(progress_reporter=)``'s value, checked."""
    if reporter is None or isinstance(reporter, ProgressReporter):
        return reporter
    raise InvalidTypeError(f"progress_reporter={reporter!r}: pass a CLIReporter(...), or an instance of a "
                           "muster.tune.ProgressReporter subclass with should_report() and report().")

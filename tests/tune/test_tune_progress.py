"""The live trial table: what a person sees on a terminal and in CI logs."""

from __future__ import annotations

import io

from rich.console import Console

from muster.observe.tune_progress import TuneProgress
from muster.tune.trial import Trial


def _trials():
    a = Trial("ab_00000", "f_ab_00000", {"lr": 0.01, "net": {"width": 64}}, "/x/a", {"CPU": 1.0}, status="RUNNING",
              last_result={"loss": 0.5, "training_iteration": 3})
    b = Trial("ab_00001", "f_ab_00001", {"lr": 0.1, "net": {"width": 32}}, "/x/b", {"CPU": 1.0}, status="TERMINATED",
              last_result={"loss": 0.25, "training_iteration": 8})
    c = Trial("ab_00002", "f_ab_00002", {"lr": 0.3, "net": {"width": 16}}, "/x/c", {"CPU": 1.0}, status="ERROR")
    return [a, b, c]


def test_table_shows_status_config_iteration_metric_and_best():
    view = TuneProgress("exp", "/x", "loss", "min", verbose=1)
    view.update(_trials(), "ASHA: 1 stopped early")
    out = io.StringIO()
    Console(file=out, width=160, force_terminal=False).print(view._render())
    text = out.getvalue()
    for expected in ("ab_00000", "RUNNING", "TERMINATED", "ERROR", "lr", "net/width", "0.01", "64",
                     "ASHA: 1 stopped early", "best loss=0.25 (f_ab_00001)", "1 RUNNING", "1 TERMINATED", "1 ERROR"):
        assert expected in text, (expected, text)
    assert text.index("ab_00000") < text.index("ab_00001")  # running trials first


def test_an_80_column_terminal_keeps_each_trial_id_and_status_on_one_line():
    # a default-size terminal and Ray's tune_basic_example's columns: squeeze the values, not the trial's id
    wide = [Trial(t.trial_id, t.trial_name, {**t.config, "steps": 5, "width": 14.2893, "height": -56.6112,
                                             "activation": "relu"}, t.path, t.resources, status=t.status,
                  last_result={"mean_loss": 7.1534, "training_iteration": 5}) for t in _trials()]
    view = TuneProgress("exp", "/x", "mean_loss", "min", verbose=1)
    view.update(wide, "")
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(view._render())
    lines = out.getvalue().splitlines()
    for expected in ("ab_00000", "ab_00001", "ab_00002", "RUNNING", "TERMINATED", "ERROR"):
        assert any(expected in line for line in lines), (expected, out.getvalue())


def test_plain_lines_when_not_a_terminal(capsys):
    view = TuneProgress("exp", "/x", "loss", "max", verbose=1)
    view.start()
    view.event("f_ab_00000 started with {lr=0.01}")
    view.stop(_trials())
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[muster.tune] experiment 'exp' -> /x"
    assert out[1] == "[muster.tune] f_ab_00000 started with {lr=0.01}"
    assert out[2].startswith("[muster.tune] experiment 'exp' done after") and "best loss=0.5 (f_ab_00000)" in out[2]


def test_silent_at_verbose_0(capsys):
    view = TuneProgress("exp", "/x", None, None, verbose=0)
    view.start()
    view.update(_trials(), "")
    view.stop(_trials())
    assert capsys.readouterr().out == ""


def test_a_cli_reporter_picks_columns_rows_and_order(capsys):
    """Ray's CLIReporter: before, importing it raised muster's unsupported-API error."""
    from muster.tune import CLIReporter

    reporter = CLIReporter(metric_columns={"loss": "Loss"}, parameter_columns=["lr"], max_progress_rows=2,
                           sort_by_metric=True, max_report_frequency=0)
    reporter.add_metric_column("accuracy")
    view = TuneProgress("exp", "/x", "loss", "min", verbose=1)
    view.use(reporter)
    view.update(_trials(), "")  # off a terminal: the table, as often as max_report_frequency says
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if "trial" in line and "status" in line)
    assert [c.strip() for c in header.strip("│┃| ").replace("┃", "│").split("│")] == \
        ["trial", "status", "lr", "iter", "Loss", "accuracy"]
    assert "net/width" not in text and "(+1 more)" in text
    assert text.index("ab_00001") < text.index("ab_00000")  # the best loss first (sort_by_metric)


def test_a_reporter_of_the_user_s_own_replaces_the_table(capsys):
    from muster.tune import ProgressReporter

    class Counting(ProgressReporter):
        def __init__(self):
            self.calls = []

        def setup(self, start_time=None, total_samples=None, metric=None, mode=None, **kwargs):
            self.calls.append(("setup", metric, mode))

        def should_report(self, trials, done=False):
            return True

        def report(self, trials, done, *sys_info):
            self.calls.append(("report", done, [(t.trial_id, t.last_result.get("loss")) for t in trials]))

    mine = Counting()
    view = TuneProgress("exp", "/x", "loss", "min", verbose=1)
    view.use(mine)
    view.update(_trials(), "note")
    view.stop(_trials())
    assert mine.calls[0] == ("setup", "loss", "min")
    assert [c[1] for c in mine.calls[1:]] == [False, True]  # once per refresh, then done
    assert mine.calls[-1][2] == [("ab_00000", 0.5), ("ab_00001", 0.25), ("ab_00002", None)]
    assert "┃" not in capsys.readouterr().out  # no table of muster's


def test_run_config_takes_a_reporter_in_a_tuner(capsys):
    import warnings

    from muster import tune
    from muster.exceptions import InvalidTypeError

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reporter is used, not warned about
        config = tune.RunConfig(progress_reporter=tune.CLIReporter(metric_columns=["score"], max_report_frequency=0))

    def trainable(cfg):
        tune.report({"score": cfg["x"] * 2})

    grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])},
                      tune_config=tune.TuneConfig(metric="score", mode="max"), run_config=config).fit()
    assert sorted(r.metrics["score"] for r in grid) == [2, 4]
    out = capsys.readouterr().out
    assert "score" in out and " x " in out.replace("│", " ")
    import pytest

    with pytest.raises(InvalidTypeError, match=r"progress_reporter=.*CLIReporter"):
        tune.Tuner(trainable, run_config=tune.RunConfig(progress_reporter="table")).fit()

"""HyperBand (Li et al., 2017), synchronous, as Ray's ``HyperBandScheduler``.

Trials are grouped in brackets, made in Ray's order: ``s = 0, 1, ..., s_max``
(``s_max = round(log(max_t) / log(eta))``), then again from 0.  Bracket ``s``
takes up to ``ceil((s_max + 1) / (s + 1) * eta**s)`` trials and first judges
them at ``int(max_t / eta**s)`` (in ``time_attr`` units; a bracket whose
milestone would be 0 is skipped, as Ray skips it), so the first trials run
to ``max_t`` and later brackets stop more of theirs early.  A trial that
reaches its bracket's milestone pauses until every trial of the bracket has;
then the top ``ceil(n/eta)`` of the bracket's ``n`` go on to the next
milestone (``eta`` times further, whole units) and the rest stop, ``n``
shrinking so at each milestone; after ``s`` such rounds the bracket's trials
stop at ``max_t`` (or run on, without ``stop_last_trials``). Ray stops them at
the next whole milestone instead, short of ``max_t`` where it is no power of
``eta`` (18 for ``max_t=20``, ``eta=3``).  Paused trials resume from their latest checkpoint: report checkpoints,
or they start over.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from muster.exceptions import InvalidArgumentError
from muster.tune.schedulers.trial_scheduler import TrialScheduler

if TYPE_CHECKING:
    from muster.tune.trial import Trial


class _HyperBandBracket:
    def __init__(self, capacity: int, milestone: float, halves: int):
        self.capacity, self.milestone, self.halves = capacity, milestone, halves  # halvings left
        self.n = capacity  # how many the bracket keeps going at this milestone (Ray's nominal size)
        self.ended = 0  # trials that left the bracket (finished, failed, stopped)
        self.live: set[str] = set()  # trial ids not stopped or finished
        self.reached: dict[str, float] = {}  # trial id -> score at the current milestone

    def full(self) -> bool:
        return len(self.live) + self.ended >= self.capacity


class HyperBandScheduler(TrialScheduler):
    """Args:
        time_attr: the result field that measures progress (monotonic).
        metric / mode: what to optimise (or set them on TuneConfig).
        max_t: the most ``time_attr`` a trial gets.
        reduction_factor: ``eta``: keep the top ``1/eta`` at each milestone.
        stop_last_trials: stop trials at ``max_t`` (else let them run on).
    """

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None, mode: str | None = None,
                 max_t: float = 81, reduction_factor: float = 3, stop_last_trials: bool = True):
        super().__init__(metric, mode)
        if not max_t > 0:
            raise InvalidArgumentError(f"HyperBandScheduler(max_t={max_t!r}): use a number > 0.")
        if not reduction_factor > 1:
            raise InvalidArgumentError(f"HyperBandScheduler(reduction_factor={reduction_factor!r}): use a number > 1.")
        self.time_attr, self.max_t = time_attr, max_t
        self.eta, self.stop_last_trials = reduction_factor, stop_last_trials
        self.s_max = int(round(math.log(max_t) / math.log(reduction_factor)))  # Ray's s_max_1 - 1
        self._brackets: list[_HyperBandBracket] = []
        self._made = 0  # brackets made or skipped: the next one's s is this modulo s_max + 1
        self._of: dict[str, _HyperBandBracket] = {}
        self._promoted: set[str] = set()  # paused trials allowed to go on
        self.num_stopped = 0

    def _new_bracket(self) -> _HyperBandBracket:
        while True:
            s = self._made % (self.s_max + 1)
            self._made += 1
            milestone = int(self.max_t * self.eta ** -s)
            if milestone > 0:  # Ray skips a bracket whose first milestone would be 0
                capacity = math.ceil((self.s_max + 1) / (s + 1) * self.eta ** s)
                return _HyperBandBracket(capacity, milestone, s)

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        if not self._brackets or self._brackets[-1].full():
            self._brackets.append(self._new_bracket())
        bracket = self._brackets[-1]
        bracket.live.add(trial.trial_id)
        self._of[trial.trial_id] = bracket

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        self._require_metric()
        t = result.get(self.time_attr)
        bracket = self._of.get(trial.trial_id)
        self._promoted.discard(trial.trial_id)  # running again: its promotion is used
        if bracket is None or not isinstance(t, (int, float)):
            return self.CONTINUE
        if t >= self.max_t:
            return self.STOP if self.stop_last_trials else self.CONTINUE
        if t < bracket.milestone:
            return self.CONTINUE
        score = self._score(result)
        bracket.reached[trial.trial_id] = score if score is not None else -math.inf
        if not self._judge(controller, bracket, trial.trial_id):
            return self.PAUSE  # wait for the rest of the bracket
        return self.CONTINUE if trial.trial_id in bracket.live else self.STOP

    def _judge(self, controller: Any, bracket: _HyperBandBracket, current: str | None) -> bool:
        """Promote the top of a bracket whose live trials all reached its milestone; stop the rest."""
        complete = bracket.full() or getattr(controller, "_search_done", False)
        if not bracket.live or not complete or not bracket.live <= set(bracket.reached):
            return False
        ranked = sorted(bracket.live, key=lambda i: bracket.reached[i], reverse=True)
        last = bracket.halves == 0
        if last:  # its last milestone: all stop there (not early), or run on without stop_last_trials
            keep = 0 if self.stop_last_trials else len(ranked)
            bracket.milestone = math.inf
        else:
            bracket.halves -= 1
            bracket.n = math.ceil(bracket.n / self.eta)
            keep = max(1, min(bracket.n, len(ranked)))
            # its last round runs to max_t: whole units would end it short (6 -> 18 of max_t=20, where Ray stops)
            further = int(min(bracket.milestone * self.eta, self.max_t))
            bracket.milestone = self.max_t if bracket.halves == 0 else further
        for trial_id in ranked[keep:]:
            self._drop(bracket, trial_id)
            self.num_stopped += not last
            if trial_id != current:
                self._terminate_paused(controller, trial_id)
        bracket.reached = {}
        self._promoted |= {i for i in ranked[:keep] if i != current}
        return True

    def _drop(self, bracket: _HyperBandBracket, trial_id: str) -> None:
        if trial_id in bracket.live:
            bracket.live.discard(trial_id)
            bracket.ended += 1
        bracket.reached.pop(trial_id, None)

    @staticmethod
    def _terminate_paused(controller: Any, trial_id: str) -> None:
        """End a trial that waits paused (it has no process to stop), telling whoever listens."""
        for trial in controller.trials:
            if trial.trial_id == trial_id and trial.run is None and trial.status == "PAUSED":
                trial.status = "TERMINATED"
                controller._dirty = True
                controller.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None)
                controller._tell_as(trial, "PAUSED", "on_trial_complete")  # as Ray's stop_trial shows it

    def _left(self, controller: Any, trial: Trial) -> None:
        self._promoted.discard(trial.trial_id)
        bracket = self._of.get(trial.trial_id)
        if bracket is not None:
            self._drop(bracket, trial.trial_id)
            self._judge(controller, bracket, None)

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any] | None) -> None:
        self._left(controller, trial)

    def on_trial_error(self, controller: Any, trial: Trial) -> None:
        self._left(controller, trial)

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        self._left(controller, trial)

    def choose_trial_to_run(self, controller: Any, candidates: list[Trial]) -> Trial | None:
        """New trials first; a paused one only once its bracket promoted it."""
        for trial in candidates:
            if trial.status == "PENDING" or getattr(trial, "restart_plan", None):
                return trial
        for bracket in self._brackets:  # the search may have ended since the last result
            self._judge(controller, bracket, None)
        for trial in candidates:  # kept promoted until it reports: the controller may not have room now
            if trial.trial_id in self._promoted:
                return trial
        return None

    def debug_string(self) -> str:
        return f"HyperBand: {len(self._brackets)} brackets, {self.num_stopped} trials stopped early"

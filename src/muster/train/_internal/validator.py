"""The driver's queue of checkpoint validations (``ValidationConfig``): one task at a time, in order.

Each validation runs ``fn(checkpoint, **kwargs)`` as a task on the run's engine while the
gang trains. Its outcome goes to the checkpoint manager (``CheckpointManager.validated``),
which merges the metrics and keeps them beside the checkpoint. Validations outlive
attempts (a restart does not cancel them); ``resume()`` queues those an earlier driver
left pending, ``finish()`` waits for every one at the end of a run, ``stop()`` cancels the
rest after Ctrl-C (they stay pending for the next driver).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from muster.exceptions import GetTimeoutError, InvalidTypeError, MusterError, TaskCancelledError, TaskError
from muster.train._internal.checkpoint_manager import CheckpointManager
from muster.train.checkpoint import Checkpoint
from muster.train.validation import ValidationConfig

VALIDATED, TIMEOUT, FAILED = "VALIDATED", "VALIDATION_TIMEOUT", "VALIDATION_FAILED"


def _validate(fn: Callable[..., Any], checkpoint: Checkpoint, kwargs: dict[str, Any]) -> dict[str, Any]:
    metrics = fn(checkpoint, **kwargs)
    if not isinstance(metrics, dict):
        raise InvalidTypeError(f"the validation function {getattr(fn, '__name__', fn)!r} returned "
                               f"{type(metrics).__name__}; return a dict of metrics.")
    return metrics


class Validator:
    def __init__(self, config: ValidationConfig, ledger: CheckpointManager, say: Callable[[str], None],
                 warn: Callable[[str], None]):
        self.config, self.ledger, self.say, self.warn = config, ledger, say, warn
        self._queue: queue.Queue[tuple[int, str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._current: Any = None  # the running validation's ObjectRef

    def submit(self, round_: int, path: str, spec: Any) -> None:
        """Validate the committed checkpoint of ``round_`` at ``path`` (``spec``: what report() sent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="muster-validations", daemon=True)
            self._thread.start()
        self._queue.put((round_, path, spec))

    def resume(self) -> None:
        """Queue the validations of committed checkpoints that an earlier driver did not finish."""
        for r, spec in sorted(self.ledger.pending_validation.items()):
            self.submit(r, self.ledger.storage.checkpoint_dir(r), spec)

    def finish(self) -> None:
        """Wait for every submitted validation to end (Ray waits too)."""
        if self._thread is not None:
            if self.ledger.pending_validation and not self._stopped.is_set():
                self.say(f"waiting for {len(self.ledger.pending_validation)} checkpoint validation(s)")
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def stop(self) -> None:
        """Cancel the running validation and drop the queued ones (they stay pending in storage)."""
        self._stopped.set()
        current = self._current
        if current is not None:
            from muster.tasks import cancel

            cancel(current, force=True)
        self.finish()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            if not self._stopped.is_set():
                self._run(*item)

    def _run(self, round_: int, path: str, spec: Any) -> None:
        from muster.tasks import cancel, get, remote

        kwargs, timeout_s = self.config.settings(spec)
        task = remote(_validate).options(**self.config.ray_remote_kwargs) if self.config.ray_remote_kwargs \
            else remote(_validate)
        ref = self._current = task.remote(self.config.fn, Checkpoint(path, self.ledger.storage.fs), kwargs)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        try:
            metrics, status = get(ref, timeout=timeout_s), VALIDATED
        except GetTimeoutError:
            cancel(ref, force=True)
            self.warn(f"validation of {name} ran past its timeout_s={timeout_s} and was cancelled.")
            metrics, status = {}, TIMEOUT
        except TaskCancelledError:
            return  # stop(): it stays pending, and a resumed run validates it
        except TaskError as e:  # the user's function raised: the run goes on, the status says so
            self.warn(f"validation of {name} failed: {e.cause_type}: {e.message}\n{e.remote_traceback.rstrip()}")
            metrics, status = {}, FAILED
        except MusterError as e:  # its worker died (past its retries), or the engine refused the task
            self.warn(f"validation of {name} failed: {e}")
            metrics, status = {}, FAILED
        finally:
            self._current = None
        self.ledger.validated(round_, metrics, status)
        if status == VALIDATED:
            self.say(f"validated {name}: {metrics}")

"""How a replica logs: its ``muster.serve`` / ``ray.serve`` loggers, per the deployment's ``LoggingConfig``.

Lines go to the replica's stderr, which the runtime captures (the driver's output, ``muster logs``, the
run store), as text (``INFO <time> <app>_<deployment> <replica's unique id> <file>:<line> - <message>``,
Ray's names) or, with ``encoding="JSON"``, one JSON object per line with Ray's keys. With ``logs_dir``
every line also goes to ``<logs_dir>/replica_<app>_<deployment>_<id>.log`` (Ray's file name), and there,
as in Ray, one access line per request (``GET /route 200 1.2ms``) unless ``enable_access_log=False``;
access lines never go to stderr (Ray's neither).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any

from muster.serve import context
from muster.serve.config import LoggingConfig

SERVE_LOGGER = "muster.serve"  # Ray's "ray.serve": what replicas log there shows in their output
#: The loggers a replica sends to its output: muster's, and Ray's name for it (ported code keeps
#: ``logging.getLogger("ray.serve")``: the port changes imports, not strings).
SERVE_LOGGERS = (SERVE_LOGGER, "ray.serve")
_ACCESS = "serve_access_log"  # set on an access line's record (Ray's ``extra`` key)
# a LogRecord's own attributes: what is not one of them came from ``extra=`` and goes into the JSON object
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_MARK = "_muster_replica"  # on the handlers this module added (once per process)


class _ReplicaFields(logging.Filter):
    """Puts Ray's fields on each record: the replica's, and the request's while one is served."""

    def __init__(self, app: str, deployment: str, replica_id: str):
        super().__init__()
        name, unique = component(app, deployment, replica_id)
        self.fields = {"deployment": name, "replica": unique, "component_name": "replica"}
        if app:
            self.fields["application"] = app

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in self.fields.items():
            record.__dict__.setdefault(k, v)
        request_id, route = context.current_request_id(), context.current_route()
        if request_id:
            record.__dict__.setdefault("request_id", request_id)
        if route:
            record.__dict__.setdefault("route", route)
        return True


class JSONFormatter(logging.Formatter):
    """One JSON object per record, with the keys Ray's Serve writes (``asctime``, ``levelname``, ``message``,
    ``filename``, ``lineno``, ``process``, ``exc_text`` on an exception, ``timestamp_ns``, ``deployment``,
    ``replica``, ``component_name``, ``application``, ``request_id`` and ``route`` in a request), the
    record's ``extra=`` fields and the ``additional_log_standard_attrs``."""

    def __init__(self, additional: list[str]):
        super().__init__()
        self.additional = additional

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"asctime": self.formatTime(record), "levelname": record.levelname,
                               "message": record.getMessage(), "filename": record.filename,
                               "lineno": record.lineno, "process": record.process}
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            out["exc_text"] = record.exc_text
        for key in self.additional:
            out[key] = getattr(record, key, None)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != _ACCESS:
                out[key] = value
        out["timestamp_ns"] = int(record.created * 1e9)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """muster's text line, then ``key=value`` for each of the ``additional_log_standard_attrs`` (as Ray's)."""

    def __init__(self, name: str, unique: str, additional: list[str]):
        super().__init__(f"%(levelname)s %(asctime)s {name} {unique} %(filename)s:%(lineno)d - %(message)s")
        self.additional = additional

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={getattr(record, k, None)}" for k in self.additional)
        return f"{line} {extra}" if extra else line


def _not_access(record: logging.LogRecord) -> bool:
    return not getattr(record, _ACCESS, False)


def component(app: str, deployment: str, replica_id: str) -> tuple[str, str]:
    """How Ray's replica names itself in its log lines: ``<app>_<deployment>`` and the replica's unique id."""
    return (f"{app}_{deployment}" if app else deployment), replica_id.rsplit("#", 1)[-1]


def file_name(app: str, deployment: str, replica_id: str) -> str:
    """Ray's replica log file name: ``replica_<app>_<deployment>_<replica's unique id>.log``."""
    name, unique = component(app, deployment, replica_id)
    safe = re.sub(r"[^\w.-]", "_", name)
    return f"replica_{safe}_{unique}.log"


class ReplicaLogs:
    """Sets up the replica's loggers (once per process) and writes its access lines."""

    def __init__(self, app: str, deployment: str, replica_id: str, config: LoggingConfig | None):
        cfg = config or LoggingConfig()
        self.config = cfg
        self.path: str | None = None
        self._logger = logging.getLogger(SERVE_LOGGER)
        handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
        handlers[0].addFilter(_not_access)
        if cfg.logs_dir:
            os.makedirs(cfg.logs_dir, exist_ok=True)
            self.path = os.path.join(cfg.logs_dir, file_name(app, deployment, replica_id))
            handlers.append(logging.FileHandler(self.path))
            if not cfg.enable_access_log:
                handlers[1].addFilter(_not_access)
        self.access = bool(self.path and cfg.enable_access_log)  # else no access line is made at all
        fields = _ReplicaFields(app, deployment, replica_id)
        for h in handlers:
            h.addFilter(fields)
            h.setFormatter(JSONFormatter(cfg.additional_log_standard_attrs) if cfg.encoding == "JSON"
                           else TextFormatter(*component(app, deployment, replica_id),
                                              cfg.additional_log_standard_attrs))
            setattr(h, _MARK, True)
        for name in SERVE_LOGGERS:
            logger = logging.getLogger(name)
            if any(getattr(h, _MARK, False) for h in logger.handlers):
                continue
            for h in handlers:
                logger.addHandler(h)
            if config is not None:  # the deployment's logging_config (Ray's LoggingConfig.log_level)
                logger.setLevel(cfg.log_level)
            elif logger.level == logging.NOTSET:  # a level the user set in the replica is kept
                logger.setLevel(logging.INFO)
            logger.propagate = False  # as Ray's: not twice when the user configured the root logger

    def request_done(self, method: str, route: str, status: int | str, started: float) -> None:
        """One access line (``GET /route 200 1.2ms``), when access lines are kept (a file in ``logs_dir``)."""
        if self.access:
            self._logger.info("%s %s %s %.1fms", method, route, status, (time.perf_counter() - started) * 1e3,
                              extra={_ACCESS: True})

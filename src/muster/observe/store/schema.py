"""The run store's SQLite schema, version by version.

One database per storage root holds every run under it. Version 1:

======================  =====================================================================
table                   one row per
======================  =====================================================================
``meta``                setting; ``schema_version`` says which schema the file holds
``runs``                run (a Trainer's ``fit()`` or a Tune trial): name, folder, status,
                        experiment / trial id / config for Tune trials
``attempts``            gang started for a run (0, 1, ... across restarts and drivers)
``workers``             rank of an attempt: host, pid, resources, state
                        (``ALIVE``, ``FINISHED``, ``FAILED``, ``STOPPED``)
``reports``             ``train.report()`` of one rank: iteration, time, metrics (JSON), and
                        the worker's step time and the part of it spent waiting on data
``samples``             system sample of one worker (every ~2 s): CPU %, RSS, GPU use/memory
``checkpoints``         committed checkpoint: round, folder, metrics (JSON)
``events``              run event: ``start``, ``attempt``, ``failure`` (with its cause),
                        ``restart``, ``finish``
``logs``                line a worker printed (stdout and stderr)
======================  =====================================================================

Version 2 adds Serve (``muster.serve``), in tables of their own; a version 1
file gains them when a newer muster opens it:

======================  =====================================================================
``serve_replicas``      replica ever started: app, deployment, replica number (the ``#N`` of
                        its log label), host, pid, state (``RUNNING``, ``STOPPED``, ``DEAD``),
                        start and end, the cause of its end
``serve_metrics``       sample of a deployment (``replica`` NULL) or one replica, at most one
                        a second: requests/s, p50/p99 latency (ms), requests served and
                        errors since start, ongoing requests; running and target replicas
                        and restarts on the deployment rows
``serve_events``        deployment event: ``deploy``, ``replica_started``, ``replica_died``,
                        ``restart``, ``replica_stopped``, ``delete``
``serve_logs``          line a replica printed (stdout and stderr)
======================  =====================================================================

Version 3 adds ``muster.data``'s live view, in a table of its own; older files
gain it when a newer muster opens them:

======================  =====================================================================
``data_ops``            sample of one dataset operator in one training worker (with each system
                        sample, ~2 s, and when a pass ends): rank, the worker's pass number
                        (``execution``), operator, rows in and out, rows/s, bytes in flight
                        and the budget, seconds blocked on backpressure, actors, whether the
                        pass had ended
======================  =====================================================================

Version 3 also adds an LLM deployment's figures (``muster.serve.llm``) as columns of
``serve_metrics``, NULL on the rows of other deployments: ``llm_requests``,
``prompt_tokens`` and ``completion_tokens`` since start (as the clients' ``usage``
counts them), ``tokens_per_s`` (completion tokens per second over the sample's
window), ``ttft_p50_ms`` / ``ttft_p99_ms`` / ``ttft_samples`` (time to first
token of the requests that started in the window), and the engines' queue now:
``engine_running``, ``engine_waiting`` and their sum ``queue_depth``.

Version 4 adds the user metrics of Serve replicas (``serve.metrics`` / ``muster.util.metrics``):

======================  =====================================================================
``serve_custom_metrics`` series of a deployment's user metric at one sample (the rows of a
                        sample share its ``time``): name, kind (``counter``, ``gauge``,
                        ``histogram``), description, tags (JSON, with Ray's ``deployment``,
                        ``replica``, ``application``), ``value`` (counter, gauge) or the
                        histogram's ``boundaries`` and per bucket ``buckets`` (JSON), ``sum``
                        and ``count``; cumulative, summed over the replicas with the same tags
======================  =====================================================================

Version 5 adds the user metrics of the engine's other processes (tasks, actors, the driver):

======================  =====================================================================
``user_metrics``        series of a user metric (``muster.util.metrics``) as one driver last
                        merged it across its processes, replaced as it changes: the driver's
                        ``session`` (host, pid and start), ``host``, ``pid``, ``ended`` (set
                        when its engine shut down), ``time``, and the series' columns as in
                        ``serve_custom_metrics`` (tags JSON with sorted keys); the rows of
                        drivers gone are folded into session ``archive`` (counters and
                        histograms only; ``observe/metrics_recorder.py``)
======================  =====================================================================

Times are Unix seconds (float). JSON columns hold text. A newer muster
migrates an older file forward in :func:`migrate`; an older muster refuses
a newer file with a message instead of misreading it.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 5

_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    trainer TEXT,
    experiment TEXT,
    trial_id TEXT,
    config TEXT,
    num_workers INTEGER,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL,
    error TEXT,
    driver_host TEXT,
    driver_pid INTEGER
);
CREATE INDEX IF NOT EXISTS runs_experiment ON runs (experiment);
CREATE TABLE IF NOT EXISTS attempts (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    status TEXT NOT NULL,
    cause TEXT,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS workers (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    host TEXT,
    pid INTEGER,
    resources TEXT,
    state TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    PRIMARY KEY (run_id, attempt, rank)
);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    time REAL NOT NULL,
    metrics TEXT NOT NULL,
    step_s REAL,
    data_wait_s REAL
);
CREATE INDEX IF NOT EXISTS reports_run ON reports (run_id, id);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    time REAL NOT NULL,
    cpu_percent REAL,
    rss_bytes INTEGER,
    gpu_util REAL,
    gpu_mem_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id, id);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    round INTEGER NOT NULL,
    path TEXT NOT NULL,
    time REAL NOT NULL,
    metrics TEXT NOT NULL,
    PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    rank INTEGER,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id, id);
CREATE TABLE IF NOT EXISTS logs (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER,
    rank INTEGER,
    pid INTEGER,
    time REAL NOT NULL,
    line TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS logs_run ON logs (run_id, rank, id);
"""

_V2 = """
CREATE TABLE IF NOT EXISTS serve_replicas (
    id TEXT PRIMARY KEY,
    app TEXT NOT NULL,
    deployment TEXT NOT NULL,
    replica INTEGER NOT NULL,
    host TEXT,
    pid INTEGER,
    state TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    cause TEXT
);
CREATE INDEX IF NOT EXISTS serve_replicas_dep ON serve_replicas (app, deployment, started_at);
CREATE TABLE IF NOT EXISTS serve_metrics (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    app TEXT NOT NULL,
    deployment TEXT NOT NULL,
    replica INTEGER,
    requests_per_s REAL,
    p50_ms REAL,
    p99_ms REAL,
    served INTEGER,
    errors INTEGER,
    ongoing INTEGER,
    running INTEGER,
    target INTEGER,
    restarts INTEGER
);
CREATE INDEX IF NOT EXISTS serve_metrics_dep ON serve_metrics (app, deployment, id);
CREATE TABLE IF NOT EXISTS serve_events (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    app TEXT NOT NULL,
    deployment TEXT,
    replica INTEGER,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS serve_events_app ON serve_events (app, id);
CREATE TABLE IF NOT EXISTS serve_logs (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    app TEXT NOT NULL,
    deployment TEXT NOT NULL,
    replica INTEGER NOT NULL,
    pid INTEGER,
    line TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS serve_logs_dep ON serve_logs (app, deployment, replica, id);
"""

_LLM_COLUMNS = (
    ("llm_requests", "INTEGER"), ("prompt_tokens", "INTEGER"), ("completion_tokens", "INTEGER"),
    ("tokens_per_s", "REAL"), ("ttft_p50_ms", "REAL"), ("ttft_p99_ms", "REAL"), ("ttft_samples", "INTEGER"),
    ("engine_running", "INTEGER"), ("engine_waiting", "INTEGER"), ("queue_depth", "INTEGER"),
)
_V3_LLM = "".join(f"ALTER TABLE serve_metrics ADD COLUMN {name} {kind};\n" for name, kind in _LLM_COLUMNS)


_V3 = """
CREATE TABLE IF NOT EXISTS data_ops (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    time REAL NOT NULL,
    execution INTEGER NOT NULL,
    op TEXT NOT NULL,
    rows_in INTEGER,
    rows_out INTEGER,
    rows_per_s REAL,
    bytes_in_flight INTEGER,
    budget_bytes INTEGER,
    blocked_s REAL,
    actors INTEGER,
    done INTEGER
);
CREATE INDEX IF NOT EXISTS data_ops_run ON data_ops (run_id, id);
""" + _V3_LLM


# a user metric's series (``muster.util.metrics``), in v4's and v5's tables: tags, boundaries, buckets are JSON
_SERIES_COLUMNS = """
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    description TEXT,
    tags TEXT NOT NULL,
    value REAL,
    boundaries TEXT,
    buckets TEXT,
    sum REAL,
    count INTEGER"""

_V4 = """
CREATE TABLE IF NOT EXISTS serve_custom_metrics (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    app TEXT NOT NULL,
    deployment TEXT NOT NULL,""" + _SERIES_COLUMNS + """
);
CREATE INDEX IF NOT EXISTS serve_custom_metrics_dep ON serve_custom_metrics (app, deployment, time);
"""

_V5 = """
CREATE TABLE IF NOT EXISTS user_metrics (
    session TEXT NOT NULL,
    host TEXT,
    pid INTEGER,
    ended REAL,
    time REAL NOT NULL,""" + _SERIES_COLUMNS + """,
    PRIMARY KEY (session, name, tags)
);
"""


class SchemaTooNewError(RuntimeError):
    """The store was written by a newer muster than this one."""


def version(conn: sqlite3.Connection) -> int:
    """The schema version a database holds (0 when it is empty)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database at ``path`` to :data:`SCHEMA_VERSION` (creating it if empty).

    Raises:
        SchemaTooNewError: the file holds a newer schema than this muster knows.
    """
    have = version(conn)
    if have > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"The run store {path} has schema version {have}, newer than this muster's {SCHEMA_VERSION}. "
            'Upgrade muster (pip install -U muster) to read it, or point storage_path elsewhere.'
        )
    if have >= SCHEMA_VERSION:
        return
    if have < 1:
        conn.executescript(_V1)
    if have < 2:
        conn.executescript(_V2)
    if have < 3:
        conn.executescript(_V3)
    if have < 4:
        conn.executescript(_V4)
    if have < 5:
        conn.executescript(_V5)
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.commit()

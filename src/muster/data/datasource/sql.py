"""``read_sql``'s source: a query against any database with a DB-API 2 (PEP 249) connector, as Ray's.

Each read task calls the user's ``connection_factory``, runs the query, fetches every row and closes the
connection; the rows become one Arrow table, its columns named from ``cursor.description`` and typed by
pyarrow from the Python values the connector returns (sqlite3: INTEGER -> int64, REAL -> double, TEXT ->
string, BLOB -> binary, an all-NULL column -> null).

Without ``shard_keys`` the query runs in one read task. With them, the read is split into shards by
``MOD(ABS(<shard_hash_fn>(<keys>)), n) = i`` (several keys joined with ``CONCAT``), as Ray does, if the
database runs such a query (checked once, with a probe); ``n`` is at most one task per 50 rows
(``SELECT COUNT(*)`` of the query).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import pyarrow as pa

from muster.data.block import BlockMetadata
from muster.data.datasource.datasource import Datasource, ReadTask
from muster.data.exceptions import DataSchemaError, DataTypeError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: Ray's: a sharded read makes at most one task per this many rows
MIN_ROWS_PER_READ_TASK = 50

#: Ray's ``read_sql`` task options: no effect on muster's engine, passed on to Ray on the Ray engine
RAY_TASK_OPTIONS = ("num_cpus", "num_gpus", "memory", "concurrency", "label_selector", "fallback_strategy",
                    "max_calls", "resources", "accelerator_type", "runtime_env", "ray_remote_args")

_CONNECTION_METHODS = ("close", "commit", "cursor")
_CURSOR_METHODS = ("execute", "executemany", "fetchone", "fetchall", "description")


def check_arguments(sql: Any, connection_factory: Any, shard_keys: Any, shard_hash_fn: Any,
                    ray_options: dict[str, Any]) -> None:
    """``read_sql``'s arguments, checked before anything connects.

    Raises:
        InvalidTypeError: a value of the wrong type, or an option ``read_sql`` does not take.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidTypeError(f"read_sql(sql={sql!r}): pass the query as a non-empty str, e.g. "
                               "'SELECT * FROM movie'.")
    if not callable(connection_factory):
        raise InvalidTypeError(f"read_sql(connection_factory={connection_factory!r}): pass a function of no arguments "
                               "that returns a DB-API 2 connection, e.g. lambda: sqlite3.connect('example.db') "
                               "(each read task calls it).")
    if shard_keys is not None and (isinstance(shard_keys, str) or not isinstance(shard_keys, (list, tuple))
                                   or not shard_keys or not all(isinstance(k, str) and k for k in shard_keys)):
        raise InvalidTypeError(f"read_sql(shard_keys={shard_keys!r}): pass a list of column names, e.g. ['id'], "
                               "or None to read in one task.")
    if not isinstance(shard_hash_fn, str) or not shard_hash_fn.isidentifier():
        raise InvalidTypeError(f"read_sql(shard_hash_fn={shard_hash_fn!r}): pass the name of a SQL function of the "
                               "database, e.g. 'MD5' (the default), 'hash' or 'SHA'.")
    unknown = sorted(set(ray_options) - set(RAY_TASK_OPTIONS))
    if unknown:
        raise InvalidTypeError(f"read_sql() got unexpected keyword argument(s) {unknown}; it takes sql_params, "
                               "shard_keys, shard_hash_fn, override_num_blocks, parallelism and Ray's "
                               f"{', '.join(RAY_TASK_OPTIONS)}.")


class SQLDatasource(Datasource):
    """The rows of ``sql`` (with ``sql_params`` bound) from the connections ``connection_factory`` makes;
    sharded by a hash of ``shard_keys`` where the database can (see the module's docstring)."""

    def __init__(self, sql: str, connection_factory: Callable[[], Any], shard_hash_fn: str = "MD5",
                 shard_keys: list[str] | None = None, sql_params: Any = None):
        super().__init__()
        self.sql, self.connection_factory, self.sql_params = sql, connection_factory, sql_params
        self.shard_hash_fn = shard_hash_fn
        keys = list(shard_keys or ())
        self.shard_keys = None if not keys else keys[0] if len(keys) == 1 else f"CONCAT({','.join(keys)})"
        self._probed: dict[int, str | None] = {}  # shards -> the database's error for the probe, None if it ran

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def sharding_refused(self, shards: int) -> str | None:
        """Why the database cannot split the read into ``shards`` (its error for a probe query), or None when it
        can; one shard, or no ``shard_keys``, is never split."""
        if shards <= 1 or self.shard_keys is None:
            return "no shard_keys" if self.shard_keys is None else "one shard"
        if shards not in self._probed:
            probe = f"SELECT COUNT(1) FROM ({self.sql}) as T WHERE {self._shard_condition(shards, 0)}"
            try:
                with self._cursor() as cursor:
                    self._execute(cursor, probe)
                self._probed[shards] = None
            except Exception as exc:  # noqa: BLE001 - each connector has its own error classes
                self._probed[shards] = f"{type(exc).__name__}: {exc}"
        return self._probed[shards]

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """One task reading the whole query when the database cannot shard it; else one per shard, at most one
        per ``MIN_ROWS_PER_READ_TASK`` rows (none for an empty result), each knowing its share of the rows."""
        if self.sharding_refused(parallelism) is not None:
            return [ReadTask(self._read_all, BlockMetadata(None, None, None))]
        total = self._count()
        if total == 0:
            return []
        shards = min(parallelism, math.ceil(total / MIN_ROWS_PER_READ_TASK))
        each, extra = divmod(total, shards)
        return [ReadTask(_Shard(self, i, shards), BlockMetadata(each + (i < extra), None, None),
                         per_task_row_limit=per_task_row_limit) for i in range(shards)]

    def _shard_condition(self, shards: int, index: int) -> str:
        return f"MOD(ABS({self.shard_hash_fn}({self.shard_keys})), {shards}) = {index}"

    def _count(self) -> int:
        return int(self.read_query(f"SELECT COUNT(*) FROM ({self.sql}) as T").column(0)[0].as_py())

    def _read_all(self) -> list[pa.Table]:
        return [self.read_query(self.sql)]

    def read_query(self, query: str) -> pa.Table:
        """The rows ``query`` returns, as one Arrow table.

        Raises:
            UserFunctionError: the connection factory or the database failed (names the query and the error).
            DataTypeError: the factory made no DB-API 2 connection.
            DataSchemaError: a column holds values pyarrow cannot put in one column (names it and the fix).
        """
        try:
            with self._cursor() as cursor:
                self._execute(cursor, query)
                rows = cursor.fetchall()
                names = [d[0] for d in cursor.description or ()]
        except (DataTypeError, UserFunctionError):
            raise
        except Exception as exc:  # noqa: BLE001 - the connector's own error classes
            raise UserFunctionError(f"read_sql: the database failed the query {query!r}: {type(exc).__name__}: "
                                    f"{exc}. Check the SQL (and sql_params) against the database.") from exc
        return _to_table(names, rows, query)

    def _execute(self, cursor: Any, query: str) -> None:
        if self.sql_params is None:
            cursor.execute(query)
        else:
            cursor.execute(query, self.sql_params)

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A cursor of a new connection: committed and closed after, rolled back (where the database can) on an
        error."""
        factory = self.connection_factory
        try:
            connection = factory()
        except Exception as exc:
            raise UserFunctionError(f"read_sql: connection_factory ({_name(factory)}) raised {type(exc).__name__}: "
                                    f"{exc}. Make it return a connection to a database this process can reach."
                                    ) from exc
        _check_has(connection, _CONNECTION_METHODS, f"connection_factory ({_name(factory)}) returned")
        try:
            cursor = connection.cursor()
            _check_has(cursor, _CURSOR_METHODS, "the connection's cursor() returned")
            yield cursor
            connection.commit()
        except BaseException:
            with contextlib.suppress(Exception):  # rollback is optional in DB-API 2
                connection.rollback()
            raise
        finally:
            connection.close()


class _Shard:
    """Reads shard ``index`` of ``shards`` (a named callable: its name shows in stats and errors)."""

    def __init__(self, source: SQLDatasource, index: int, shards: int):
        self.source, self.index, self.shards = source, index, shards
        self.__qualname__ = f"shard {index} of {shards}"

    def __call__(self) -> list[pa.Table]:
        condition = self.source._shard_condition(self.shards, self.index)
        return [self.source.read_query(f"SELECT * FROM ({self.source.sql}) as T WHERE {condition}")]


def _check_has(value: Any, members: tuple[str, ...], what: str) -> None:
    missing = [m for m in members if not hasattr(value, m)]
    if missing:
        raise DataTypeError(f"read_sql: {what} {value!r} ({type(value).__name__}), which has no {missing[0]!r}; a "
                            "DB-API 2 connection (PEP 249) is needed: return your connector's connect(...), e.g. "
                            "sqlite3.connect('example.db').")


def _name(fn: Any) -> str:
    from muster.data.plan import fn_name

    return fn_name(fn)


def _to_table(names: list[str], rows: list[Any], query: str) -> pa.Table:
    """``rows`` as columns named ``names``; as Ray's, a name given twice keeps its first place and its last
    column's values."""
    columns = {name: i for i, name in enumerate(names)}  # the last index of each name, in first-seen order
    arrays = []
    for name, i in columns.items():
        values = [row[i] for row in rows]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            kinds = sorted({type(v).__name__ for v in values if v is not None})
            raise DataSchemaError(f"read_sql: column {name!r} of {query!r} holds values of types {kinds}, which "
                                  f"make no one Arrow column ({exc}). CAST it to one type in the SQL, e.g. "
                                  f"CAST({name} AS TEXT).") from exc
    return pa.Table.from_arrays(arrays, names=list(columns))


def check_sharding(source: SQLDatasource, override_num_blocks: int | None, shard_keys: Any) -> None:
    """Ray's checks of a read asked for several blocks: they need ``shard_keys``, and a database that runs
    the sharding query (probed now).

    Raises:
        InvalidArgumentError: ``override_num_blocks`` is no positive integer; over 1, without ``shard_keys``,
            or the database refused the probe (its error quoted).
    """
    if override_num_blocks is None:
        return
    if isinstance(override_num_blocks, bool) or not isinstance(override_num_blocks, int) or override_num_blocks < 1:
        raise InvalidArgumentError(f"read_sql(override_num_blocks={override_num_blocks!r}): pass a positive number of "
                                   "read tasks (more than 1 needs shard_keys), or leave it out.")
    if override_num_blocks == 1:
        return
    if shard_keys is None:
        raise InvalidArgumentError(f"read_sql(override_num_blocks={override_num_blocks}): shard_keys must be provided "
                                   "when override_num_blocks > 1; pass shard_keys=[<column>, ...] to split the read "
                                   "by their hash, or leave override_num_blocks out (one read task).")
    refused = source.sharding_refused(override_num_blocks)
    if refused is not None:
        condition = source._shard_condition(override_num_blocks, 0)
        raise InvalidArgumentError(
            f"read_sql(override_num_blocks={override_num_blocks}, shard_keys={shard_keys!r}): the database does not "
            f"support sharding: it refused WHERE {condition} ({refused}). Set override_num_blocks to 1, or pass a "
            f"shard_hash_fn the database has (now {source.shard_hash_fn!r}; sqlite3: register one with "
            "connection.create_function in the connection_factory).")

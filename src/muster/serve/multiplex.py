"""Model multiplexing, as Ray's: ``@serve.multiplexed`` and ``serve.get_multiplexed_model_id()``.

One deployment serves many models: a request names its model (``handle.options(multiplexed_model_id=...)``,
or the HTTP header ``serve_multiplexed_model_id``), and the replica's loader, decorated with
``@serve.multiplexed(max_num_models_per_replica=n)``, keeps the ``n`` models it used last. A model asked for
again is not loaded again; requests for one model that arrive while it loads share the one load; a load that
fails is not kept. An evicted model is dropped before the next one loads: Python runs a plain ``__del__``
once nothing holds it, and an ``async def __del__`` is awaited first, as Ray's multiplexer awaits it. Each
replica tells its callers (the ingress, handles) which models it holds, loading ones
included, whenever that changes, and they route a request to a replica that holds its model
(``_internal/model_routing.py``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import weakref
from contextvars import ContextVar
from typing import Any, Awaitable, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: the HTTP header a request names its model in (Ray's name), and its form with hyphens, which Ray takes too
#: (proxies such as nginx turn underscores into hyphens)
MODEL_ID_HEADER = b"serve_multiplexed_model_id"
MODEL_ID_HEADER_HYPHENS = b"serve-multiplexed-model-id"

#: set on the loaders ``@serve.multiplexed`` makes (the replica reads the header only for their deployments)
MARK = "__muster_multiplexed__"


_model_id: ContextVar[str] = ContextVar("muster_serve_multiplexed_model_id", default="")


def get_multiplexed_model_id() -> str:
    """The model the request being served names ("" when it names none)."""
    return _model_id.get()


def set_model_id(model_id: str) -> None:
    """Name the model of the request running in this context (the replica does it)."""
    _model_id.set(model_id)


def header_model_id(headers: Any) -> str:
    """The model an ASGI header list (``[(bytes, bytes), ...]``) names; "" when none."""
    for k, v in headers:
        if k == MODEL_ID_HEADER or k == MODEL_ID_HEADER_HYPHENS:
            return v.decode("latin-1")
    return ""


def rsgi_model_id(headers: Any) -> str:
    """The model an RSGI request's headers (a mapping of lower-case str names) name; "" when none."""
    return headers.get("serve_multiplexed_model_id") or headers.get("serve-multiplexed-model-id", "")


def is_multiplexed(target: Any) -> bool:
    """Whether a deployment's requests are routed by model: its class has a ``@serve.multiplexed`` loader, or
    its function (or a method of its class) calls one by a global or enclosing name, as a function deployment
    calling a module-level loader does."""
    if not inspect.isclass(target):
        return _marked(target) or _calls_loader(target)
    return any(_marked(f) or _calls_loader(f)
               for klass in target.__mro__[:-1] for v in vars(klass).values()
               for f in [getattr(v, "__func__", v)])  # the function of a staticmethod/classmethod


def _marked(obj: Any) -> bool:
    try:  # static: no __getattr__ of a user's global (a handle, a lazy module) runs
        return inspect.getattr_static(obj, MARK, False) is True
    except Exception:  # noqa: BLE001 - an object that cannot be looked at is no loader
        return False


def _calls_loader(fn: Any) -> bool:
    """Whether ``fn`` names a loader among its globals or enclosing variables (nested code included)."""
    code = getattr(fn, "__code__", None)
    if not inspect.iscode(code):
        return False
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            if _marked(cell.cell_contents):
                return True
        except ValueError:  # a cell not filled yet
            continue
    scope = getattr(fn, "__globals__", None) or {}
    todo = [code]
    while todo:
        c = todo.pop()
        if any(_marked(scope.get(n)) for n in c.co_names):
            return True
        todo += [k for k in c.co_consts if inspect.iscode(k)]
    return False


_every: "weakref.WeakSet[_Models]" = weakref.WeakSet()  # every loader's models in this process
_on_change: list[Callable[[], None]] = []  # the replica's: tell the callers


def held() -> tuple[str, ...]:
    """The model ids this process holds or is loading, over every loader."""
    return tuple(dict.fromkeys(m for models in list(_every) for m in models.loaded))


def on_change(hook: Callable[[], None]) -> None:
    """Call ``hook()`` whenever a model starts loading, is evicted, or fails to load (the replica sets it)."""
    _on_change[:] = [hook]


def _changed() -> None:
    for hook in _on_change:
        hook()


class _Models:
    """The models one loader keeps: the ``size`` used last (``-1``: every one), by model id."""

    def __init__(self, size: int):
        self.size = size
        self.loaded: collections.OrderedDict[str, asyncio.Future] = collections.OrderedDict()
        _every.add(self)

    async def get(self, model_id: str, load: Callable[[], Awaitable[Any]]) -> Any:
        held = self.loaded.get(model_id)
        if held is None:
            finals = [gone.result() for gone in self._evict() if _async_del(gone) is not None]
            held = asyncio.ensure_future(_unload_then_load(finals, load) if finals else load())
            self.loaded[model_id] = held
            _changed()  # reported while it loads (as Ray), so requests for it follow this one
        else:
            self.loaded.move_to_end(model_id)
        try:
            return await asyncio.shield(held)
        except BaseException:
            if held.done() and self.loaded.get(model_id) is held:  # a failed load is not kept
                del self.loaded[model_id]
                _changed()
            raise

    def _evict(self) -> list[asyncio.Future]:
        """Make room for one more model: the least recently used go (held by nothing else, Python frees them)."""
        gone = []
        while 0 < self.size <= len(self.loaded):
            gone.append(self.loaded.popitem(last=False)[1])
        return gone


def _async_del(loaded: asyncio.Future) -> Callable[[Any], Awaitable[None]] | None:
    """The ``async def __del__`` of the model a finished load gave, if its class has one."""
    if not loaded.done() or loaded.cancelled() or loaded.exception() is not None:
        return None
    final = getattr(type(loaded.result()), "__del__", None)
    return final if inspect.iscoroutinefunction(final) else None


async def _unload_then_load(finals: list[Any], load: Callable[[], Awaitable[Any]]) -> Any:
    """Await each evicted model's ``async def __del__`` (Ray's multiplexer does, before it loads the next: the
    memory it frees is the new model's), then load."""
    while finals:
        model = finals.pop(0)
        try:
            await type(model).__del__(model)
        except Exception as exc:  # the request is for the next model: it still loads
            logging.getLogger("muster.serve").warning("the evicted model %r's __del__ raised %r", model, exc)
        del model
    return await load()


class _Loader:
    """One decorated loader's models: per object of the deployment's class, or one set for a plain function.

    It travels empty (a loader defined in a script is pickled by value with its deployment): each replica
    keeps the models it loads itself.
    """

    def __init__(self, size: int):
        self.size = size
        self.alone: _Models | None = None
        self.per_owner: weakref.WeakKeyDictionary[Any, _Models] = weakref.WeakKeyDictionary()

    def __reduce__(self) -> tuple:
        return _Loader, (self.size,)

    def models(self, owner: Any) -> _Models:
        if owner is None:
            if self.alone is None:
                self.alone = _Models(self.size)
            return self.alone
        got = self.per_owner.get(owner)
        if got is None:
            got = self.per_owner[owner] = _Models(self.size)
        return got


def multiplexed(func: Callable[..., Any] | None = None, *, max_num_models_per_replica: int = 3) -> Any:
    """Make ``async def get_model(self, model_id)`` a loader whose models each replica keeps (Ray's); or a
    module-level ``async def get_model(model_id)``, which a function deployment (or a class) calls.

    Raises:
        ValueError: ``max_num_models_per_replica`` is not a positive integer (or -1: no limit).
        TypeError: the function is not ``async def`` of one model id (after ``self``).
    """
    size = max_num_models_per_replica
    if isinstance(size, bool) or not isinstance(size, int) or not (size >= 1 or size == -1):
        raise InvalidArgumentError(f"serve.multiplexed(max_num_models_per_replica={size!r}): give a positive "
                                   "integer (-1: keep every model loaded).")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(fn).parameters)
        method = params[:1] == ["self"]
        if not inspect.iscoroutinefunction(fn) or len(params) != 1 + method:
            raise InvalidTypeError(f"@serve.multiplexed on {fn.__qualname__}{inspect.signature(fn)}: decorate "
                                   "`async def get_model(self, model_id: str)`, which loads and returns one model.")
        state = _Loader(size)

        @functools.wraps(fn)
        async def load(*args: Any) -> Any:
            model_id = args[-1]
            if not isinstance(model_id, str) or not model_id:
                raise InvalidArgumentError(f"{fn.__qualname__}(model_id={model_id!r}): a model id is a non-empty "
                                           "string (serve.get_multiplexed_model_id() gives the request's).")
            return await state.models(args[0] if method else None).get(model_id, lambda: fn(*args))

        setattr(load, MARK, True)
        return load

    return decorate(func) if func is not None else decorate

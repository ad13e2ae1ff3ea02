"""How muster turns values into bytes, for the engine's wire and for task snapshots, and
into JSON, for the logs it writes (``json_default``).

cloudpickle (functions and classes from ``__main__`` travel by value) with
pickle protocol 5: big buffers -- numpy arrays, and plain CPU tensors, which
are pickled as numpy views of their data -- are handed out of band instead
of being copied into the pickle stream.
"""

from __future__ import annotations

import datetime
import io
import mmap
import os
import pickle
import sys
import types
import weakref
from typing import Any, TypeVar

import cloudpickle

#: Buffers at least this big go out of band by default.
OUT_OF_BAND_MIN = 64 * 1024


def _tensor_from_numpy(array: Any) -> Any:
    import torch

    return torch.from_numpy(array)


def _code_from(rebuild: Any, args: tuple, filename: str) -> types.CodeType:
    """A code object sent by value, with the file it came from again."""
    code: types.CodeType = rebuild(*args)
    return code.replace(co_filename=filename)


#: How cloudpickle reduces a code object (a function sent by value carries its code).
_reduce_code = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


#: class -> (serializer, deserializer), as ``register_serializer`` set them in this process
_custom: dict[type, tuple[Any, Any]] = {}


def register_serializer(cls: type, *, serializer: Any, deserializer: Any) -> None:
    """Send instances of ``cls`` as ``serializer(obj)``, rebuilt with ``deserializer(that)`` where they arrive
    (Ray's ``ray.util.register_serializer``). As in Ray, it holds in the process that calls it: the driver's
    registration covers what the driver sends (task and actor arguments, ``put``); a worker that returns such
    objects registers too. It wins over the class's own pickling, and makes unpicklable classes sendable."""
    from muster.exceptions import InvalidTypeError

    if not isinstance(cls, type):
        raise InvalidTypeError(f"register_serializer({cls!r}, ...): the first argument is the class to serialize.")
    for name, fn in (("serializer", serializer), ("deserializer", deserializer)):
        if not callable(fn):
            raise InvalidTypeError(f"register_serializer({cls.__name__}, {name}={fn!r}): pass a function "
                                   f"({name}=lambda obj: ... / lambda value: ...).")
    _custom[cls] = (serializer, deserializer)


def deregister_serializer(cls: type) -> None:
    """Undo ``register_serializer(cls, ...)`` in this process (nothing to undo: nothing happens)."""
    _custom.pop(cls, None)


def _deserialized(deserializer: Any, value: Any) -> Any:
    return deserializer(value)


class Pickler(cloudpickle.Pickler):
    """cloudpickle, plus plain CPU tensors travel as numpy views (so out of band), and code sent
    by value keeps its file name: cloudpickle 3.1.3 names it ``<dynamic-code>``, which would leave
    a remote traceback through a function from ``__main__`` without the user's source lines."""

    def reducer_override(self, obj: Any) -> Any:
        if _custom:
            custom = _custom.get(type(obj))
            if custom is not None:
                return _deserialized, (custom[1], custom[0](obj))
        if type(obj) is types.CodeType and _reduce_code is not None:
            rebuild, args = _reduce_code(obj)
            return _code_from, (rebuild, args, obj.co_filename)
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor:
            if obj.device.type == "cpu" and obj.layout == torch.strided and not obj.requires_grad:
                try:
                    return _tensor_from_numpy, (obj.numpy(),)
                except (TypeError, RuntimeError):  # bfloat16 and friends: torch's own path
                    pass
        return super().reducer_override(obj)


def dumps(obj: Any, out_of_band_min: int = OUT_OF_BAND_MIN) -> tuple[memoryview, list[pickle.PickleBuffer]]:
    """The pickle stream of ``obj`` and its out-of-band buffers (those >= ``out_of_band_min`` bytes)."""
    buffers: list[pickle.PickleBuffer] = []

    def keep(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < out_of_band_min:
            return True  # small: in the stream
        buffers.append(buf)
        return False

    out = io.BytesIO()
    Pickler(out, protocol=5, buffer_callback=keep).dump(obj)
    return out.getbuffer(), buffers


class SharedBuffer(mmap.mmap):
    """A writable buffer in an anonymous shared-memory file (Linux memfd).

    The engine's wire sends such a buffer by passing its descriptor: no copy.
    """

    fd: int

    @classmethod
    def holding(cls, data: memoryview) -> "SharedBuffer":
        """A new shared buffer with a copy of ``data`` (written by the kernel in bulk, then mapped)."""
        fd = os.memfd_create("muster-object", os.MFD_CLOEXEC)
        try:
            view, done = data.cast("B"), 0
            while done < view.nbytes:
                done += os.write(fd, view[done:])
            buf = cls(fd, view.nbytes)
        except BaseException:
            os.close(fd)
            raise
        return _register(buf, fd)


class ReceivedBuffer(mmap.mmap):
    """A private, copy-on-write mapping of a shared-memory file that another process sent.

    It keeps the file, so that while no page of it has been written, passing it on
    (a task that returns its argument, a result handed to the next task) passes the
    file again instead of copying the bytes.
    """

    fd: int

    @classmethod
    def mapping(cls, fd: int, size: int) -> "ReceivedBuffer | mmap.mmap":
        """Map ``fd`` (taking ownership of it)."""
        flags, prot = mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE
        if len(_by_address) >= _KEEP_MAX:  # keep the process's descriptors for its own use
            try:
                return mmap.mmap(fd, size, flags=flags, prot=prot)
            finally:
                os.close(fd)
        try:
            return _register(cls(fd, size, flags=flags, prot=prot), fd)
        except BaseException:
            os.close(fd)
            raise


_KEEP_MAX = 256  # shared-memory files a process keeps open for passing buffers on

_Kept = TypeVar("_Kept", SharedBuffer, ReceivedBuffer)


def _register(buf: _Kept, fd: int) -> _Kept:
    """Remember ``buf``'s file under its address, so that sending it passes ``fd``; closed with it."""
    buf.fd = fd
    key = (_address(memoryview(buf)), len(buf))
    _by_address[key] = weakref.ref(buf)
    weakref.finalize(buf, _forget, key, fd)
    return buf


def _forget(key: tuple[int, int], fd: int) -> None:
    _by_address.pop(key, None)
    os.close(fd)


def shared_fd_of(view: memoryview) -> int | None:
    """A shared-memory file holding exactly ``view``'s bytes, if one exists: the file of a
    SharedBuffer ``view`` covers, or of a ReceivedBuffer it covers that nobody has written to."""
    if view.readonly or view.nbytes < 1:
        return None
    address = _address(view)
    ref = _by_address.get((address, view.nbytes))
    buf = ref() if ref is not None else None
    if isinstance(buf, SharedBuffer) or (isinstance(buf, ReceivedBuffer) and not _written(address, view.nbytes)):
        return buf.fd
    return None


_PAGE = mmap.PAGESIZE


def _written(address: int, size: int) -> bool:
    """Whether any page of a private file mapping was written (copied on write: now anonymous
    memory), read from the kernel's page map; True (so: copy) when it cannot be read."""
    first, count = address // _PAGE, -(-(address % _PAGE + size) // _PAGE)
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as f:
            raw = os.pread(f.fileno(), 8 * count, 8 * first)
    except OSError:
        return True
    if len(raw) != 8 * count:
        return True
    present, swapped, file_page = 1 << 63, 1 << 62, 1 << 61
    try:
        import numpy
    except ImportError:
        return any(e & swapped or (e & present and not e & file_page) for e in memoryview(raw).cast("Q"))
    e = numpy.frombuffer(raw, dtype=numpy.uint64)
    return bool(((e & numpy.uint64(swapped)) != 0).any()
                or (((e & numpy.uint64(present)) != 0) & ((e & numpy.uint64(file_page)) == 0)).any())


_by_address: dict[tuple[int, int], "weakref.ref[SharedBuffer | ReceivedBuffer]"] = {}


def _address(view: memoryview) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def empty_buffer(size: int) -> Any:
    """A writable buffer of ``size`` bytes, not zero-filled first (unlike ``bytearray``)."""
    try:
        import numpy
    except ImportError:
        return bytearray(size)
    return numpy.empty(size, dtype=numpy.uint8)


#: Buffers at least this big are worth a shared-memory file of their own.
SHARED_MIN = 1024 * 1024
SHARED_AVAILABLE = hasattr(os, "memfd_create")


def copy_of(data: memoryview) -> Any:
    """A writable copy of ``data``: in shared memory when big enough and available."""
    if SHARED_AVAILABLE and data.nbytes >= SHARED_MIN:
        try:
            return SharedBuffer.holding(data)
        except OSError:  # no memfd here (or out of descriptors): plain memory
            pass
    dst = empty_buffer(data.nbytes)
    memoryview(dst).cast("B")[:] = data.cast("B")
    return dst


def json_default(value: Any) -> Any:
    """What ``json.dumps(..., default=json_default)`` writes for a value JSON has no form for:
    arrays and tensors as (nested) lists, numpy scalars as numbers, sets as lists, dates and
    times as ISO text, anything else as its ``str()``. For logs (``result.json``, a checkpoint's
    manifest): a reported value is kept as it is in memory (``Result.metrics``)."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy arrays and scalars, torch tensors
        try:
            detached = getattr(value, "detach", None)
            return detached().cpu().tolist() if callable(detached) else tolist()
        except Exception:  # noqa: BLE001 - some other object's tolist: its text instead
            return str(value)
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:  # values that do not order: as they come
            return list(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)

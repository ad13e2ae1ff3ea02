"""How muster turns values into bytes, for the engine's wire and for task snapshots.

cloudpickle (functions and classes from ``__main__`` travel by value) with
pickle protocol 5: big buffers -- numpy arrays, and plain CPU tensors, which
are pickled as numpy views of their data -- are handed out of band instead
of being copied into the pickle stream.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

import cloudpickle

#: Buffers at least this big go out of band by default.
OUT_OF_BAND_MIN = 64 * 1024


def _tensor_from_numpy(array: Any) -> Any:
    import torch

    return torch.from_numpy(array)


class Pickler(cloudpickle.Pickler):
    """cloudpickle, plus plain CPU tensors travel as numpy views (so out of band)."""

    def reducer_override(self, obj: Any) -> Any:
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


def empty_buffer(size: int) -> Any:
    """A writable buffer of ``size`` bytes, not zero-filled first (unlike ``bytearray``)."""
    try:
        import numpy
    except ImportError:
        return bytearray(size)
    return numpy.empty(size, dtype=numpy.uint8)

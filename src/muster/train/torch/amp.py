"""Mixed precision for ``train_loop_per_worker``: Ray Train's ``accelerate`` /
``prepare_optimizer`` / ``backward``, on ``torch.autocast``.

``accelerate(amp=True)`` (called before ``prepare_model``) makes the prepared
model run its forward pass under autocast — bfloat16 on CPU, float16 on CUDA —
and hand back float32 outputs, so the loss is computed in full precision.
On CUDA with float16, ``prepare_optimizer`` adds a ``GradScaler``: call
``backward(loss)`` instead of ``loss.backward()`` and ``optimizer.step()`` as
usual, and gradients are scaled and unscaled for you.  bfloat16 has float32's
range, so it needs no scaler and ``backward`` is a plain ``loss.backward()``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from muster.exceptions import InvalidArgumentError, InvalidTypeError


@dataclass
class _AmpSettings:
    enabled: bool = False
    dtype: torch.dtype | None = None  # None: bfloat16 on CPU, float16 on CUDA
    configured: bool = False
    scaler: Any = None  # torch.amp.GradScaler once prepare_optimizer made one


_settings = _AmpSettings()


def accelerate(amp: bool = False, *, amp_dtype: torch.dtype | None = None) -> None:
    """Turn on training optimizations for this worker; call it once, before ``prepare_model``.

    Args:
        amp: run the prepared model's forward pass under ``torch.autocast``.
        amp_dtype: the autocast dtype; default bfloat16 on CPU, float16 on CUDA.

    Raises:
        RuntimeError: called a second time in the same worker.
        ValueError: ``amp_dtype`` is not a 16-bit float type.
    """
    if _settings.configured:
        raise RuntimeError(
            "muster.train.torch.accelerate() was already called in this worker; call it once, at the top of "
            "train_loop_per_worker, before prepare_model and prepare_optimizer."
        )
    if amp_dtype not in (None, torch.bfloat16, torch.float16):
        raise InvalidArgumentError(f"accelerate(amp_dtype={amp_dtype!r}): use torch.bfloat16, torch.float16 or None.")
    _settings.enabled, _settings.dtype, _settings.configured = bool(amp), amp_dtype, True


def amp_enabled() -> bool:
    return _settings.enabled


def autocast_dtype(device: torch.device) -> torch.dtype:
    if _settings.dtype is not None:
        return _settings.dtype
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def wrap_forward(model: torch.nn.Module, device: torch.device) -> None:
    """Make ``model.forward`` run under autocast and return float32 outputs (in place)."""
    dtype = autocast_dtype(device)
    inner: Callable[..., Any] = model.forward

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = inner(*args, **kwargs)
        return _to_float32(out)

    setattr(model, "forward", forward)  # an instance attribute: DDP/FSDP call it through the module


def _to_float32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, dict):
        return type(value)({k: _to_float32(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        items = [_to_float32(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


class _ScaledOptimizer(torch.optim.Optimizer):
    """An optimizer whose ``step`` goes through a ``GradScaler`` (float16 on CUDA).

    It is an ``Optimizer`` for ``isinstance`` checks (LR schedulers need one)
    and shares the wrapped optimizer's ``param_groups`` and ``state``; it never
    runs ``Optimizer.__init__`` itself.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any):  # no super().__init__ (see above)
        self.optimizer, self.scaler = optimizer, scaler
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None:
            raise InvalidArgumentError("prepare_optimizer: with a GradScaler, optimizer.step(closure) is not "
                                       "supported; compute the loss, call muster.train.torch.backward(loss), "
                                       "then optimizer.step().")
        out = self.scaler.step(self.optimizer)
        self.scaler.update()
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["scaler"])
            state_dict = state_dict["optimizer"]
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"ScaledOptimizer({self.optimizer!r})"


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Ready ``optimizer`` for mixed precision (Ray Train's ``prepare_optimizer``).

    With ``accelerate(amp=True)`` and float16 autocast on CUDA, the returned
    optimizer steps through a ``GradScaler`` (use ``backward(loss)``); in every
    other case (bfloat16, CPU, amp off) ``optimizer`` itself is returned.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidTypeError(f"prepare_optimizer expects a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    from muster.train.torch.train_loop_utils import get_device

    device = get_device()
    if not (_settings.enabled and device.type == "cuda" and autocast_dtype(device) == torch.float16):
        return optimizer
    if _settings.scaler is None:
        _settings.scaler = torch.amp.GradScaler("cuda")
    return _ScaledOptimizer(optimizer, _settings.scaler)


def backward(tensor: torch.Tensor) -> None:
    """``tensor.backward()``, scaled first when ``prepare_optimizer`` made a GradScaler."""
    if _settings.scaler is not None:
        _settings.scaler.scale(tensor).backward()
    else:
        tensor.backward()

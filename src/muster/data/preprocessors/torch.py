"""Ray's ``TorchVisionPreprocessor``: a torchvision (or any tensor) transform over image columns.

torchvision is not needed: any callable of a ``torch.Tensor`` (or, when it refuses one with a
``TypeError``, of the ``np.ndarray``) returning a tensor or an array works, as in Ray.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from muster.data.preprocessor import ColumnsPreprocessor
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError, InvalidTypeError


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.torchvision_preprocessor")
class TorchVisionPreprocessor(ColumnsPreprocessor):
    """Apply ``transform`` to each image of ``columns`` (``batched=True``: to each batch, shaped
    ``(B, H, W, C)``), writing the results to ``output_columns`` (default: over the inputs).

    The transform gets a ``torch.Tensor`` made from the image's array (or the array itself, when it
    raises ``TypeError`` on the tensor, as torchvision's ``ToTensor`` does) and returns a
    ``torch.Tensor`` or ``np.ndarray``. Per-image results of different shapes make a variable-shape
    tensor column. Nothing to fit.
    """

    _is_fittable = False

    def __init__(self, columns: list[str], transform: Callable[[Any], Any], output_columns: list[str] | None = None,
                 batched: bool = False):
        super().__init__(columns, output_columns)
        if not callable(transform):
            raise InvalidTypeError(f"TorchVisionPreprocessor(transform={transform!r}): pass a callable, e.g. a "
                                   "torchvision.transforms.Compose([...]) or a function of a torch.Tensor.")
        self._torchvision_transform = transform
        self._batched = bool(batched)

    @property
    def torchvision_transform(self) -> Callable[[Any], Any]:
        return self._torchvision_transform

    @property
    def batched(self) -> bool:
        return self._batched

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(columns={self._columns}, output_columns={self._output_columns}, "
                f"transform={self._torchvision_transform!r})")

    @classmethod
    def preferred_batch_format(cls) -> str:
        return "numpy"

    def _transform_numpy(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(batch)
        for name, output in zip(self._columns, self._output_columns):
            column = batch[name]
            if self._batched:
                out[output] = self._apply(column)
            else:
                out[output] = _stack([self._apply(image) for image in column])
        return out

    def _apply(self, array: np.ndarray) -> np.ndarray:
        import torch

        try:
            with warnings.catch_warnings():  # a read-only batch array: the transform does not write to it
                warnings.simplefilter("ignore", UserWarning)
                tensor = torch.as_tensor(_unwrap(array))
            result = self._torchvision_transform(tensor)
        except TypeError:  # transforms such as ToTensor take arrays, not tensors
            result = self._torchvision_transform(array)
        if isinstance(result, torch.Tensor):
            result = result.detach().cpu().numpy()
        if not isinstance(result, np.ndarray):
            raise InvalidArgumentError(
                f"TorchVisionPreprocessor: the transform {self._torchvision_transform!r} returned a "
                f"{type(result).__name__}; make it return a torch.Tensor or an np.ndarray."
            )
        return result


def _unwrap(array: np.ndarray) -> np.ndarray:
    """An object array of equal-shaped arrays (a variable-shape column whose images agree) as one array."""
    if array.dtype == object and len(array) and all(isinstance(a, np.ndarray) for a in array):
        if len({a.shape for a in array}) == 1:
            return np.stack(list(array))
    return array


def _stack(images: list[np.ndarray]) -> np.ndarray:
    """Per-image results as one array, or an object array of them when their shapes differ."""
    if len({image.shape for image in images}) <= 1 and images:
        return np.stack(images)
    out = np.empty(len(images), dtype=object)
    for i, image in enumerate(images):
        out[i] = image
    return out

"""``TorchVisionPreprocessor`` with plain torch callables (torchvision is not needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import muster.data as md
from muster.data.preprocessor import Preprocessor
from muster.data.preprocessors import TorchVisionPreprocessor
from muster.exceptions import InvalidArgumentError, InvalidTypeError

IMAGES = np.arange(4 * 2 * 3 * 3, dtype=np.uint8).reshape(4, 2, 3, 3)  # (B, H, W, C)


def _to_chw_float(batch: torch.Tensor) -> torch.Tensor:  # a batch-wise "ToTensor"
    return batch.permute(0, 3, 1, 2).float().div(255)


def test_batched_transform_gets_the_batch_as_a_tensor():
    def transform(x):
        if not isinstance(x, torch.Tensor) or x.shape[1:] != (2, 3, 3):
            raise RuntimeError(f"expected a (B, 2, 3, 3) tensor, got {type(x).__name__}")
        return _to_chw_float(x)

    p = TorchVisionPreprocessor(["image"], transform=transform, batched=True, output_columns=["x"])
    out = p.transform(md.from_numpy(IMAGES).rename_columns({"data": "image"})).take_batch(4)
    np.testing.assert_allclose(out["x"], IMAGES.transpose(0, 3, 1, 2) / 255, rtol=1e-6)
    np.testing.assert_array_equal(out["image"], IMAGES)  # the input column stays
    assert p.fit_status() == Preprocessor.FitStatus.NOT_FITTABLE
    assert repr(p).startswith("TorchVisionPreprocessor(columns=['image'], output_columns=['x'], transform=")


def test_per_image_transform_and_ragged_results():
    flip = TorchVisionPreprocessor(["data"], transform=lambda t: torch.flip(t, dims=[0]))
    out = flip.transform_batch({"data": IMAGES})
    np.testing.assert_array_equal(out["data"], IMAGES[:, ::-1])
    crop = TorchVisionPreprocessor(["data"], transform=lambda t: t[: int(t[0, 0, 0]) % 2 + 1])  # 1 or 2 rows
    rows = crop.transform(md.from_numpy(IMAGES)).take_all()
    assert [r["data"].shape[0] for r in rows] == [int(i[0, 0, 0]) % 2 + 1 for i in IMAGES]
    np.testing.assert_array_equal(rows[1]["data"], IMAGES[1][: rows[1]["data"].shape[0]])


def test_array_only_transform_and_bad_results():
    def array_only(x):
        if not isinstance(x, np.ndarray):
            raise TypeError("expects an ndarray")  # as torchvision's ToTensor does for tensors
        return x.astype(np.float32) * 2

    out = TorchVisionPreprocessor(["data"], transform=array_only).transform_batch({"data": IMAGES})
    np.testing.assert_array_equal(out["data"], IMAGES.astype(np.float32) * 2)
    with pytest.raises(InvalidArgumentError, match="returned a list; make it return a torch.Tensor"):
        TorchVisionPreprocessor(["data"], transform=lambda t: [1]).transform_batch({"data": IMAGES})
    with pytest.raises(InvalidTypeError, match="pass a callable"):
        TorchVisionPreprocessor(["data"], transform=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="one output column per input column"):
        TorchVisionPreprocessor(["a"], transform=abs, output_columns=["x", "y"])


def test_serializes_with_its_transform():
    p = TorchVisionPreprocessor(["data"], transform=_to_chw_float, batched=True)
    q = Preprocessor.deserialize(p.serialize())
    assert isinstance(q, TorchVisionPreprocessor) and q.batched and q.columns == ["data"]
    np.testing.assert_array_equal(q.transform_batch({"data": IMAGES})["data"],
                                  p.transform_batch({"data": IMAGES})["data"])

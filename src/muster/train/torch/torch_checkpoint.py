"""Ray's ``TorchCheckpoint``: a ``Checkpoint`` holding one torch model (``model.pt``), for the Ray
examples that save a model with ``from_state_dict``/``from_model`` and load it with ``get_model``,
and optionally the fitted preprocessor its inputs need (``get_preprocessor``)."""

from __future__ import annotations

import os
import tempfile

import cloudpickle
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train.checkpoint import Checkpoint


class TorchCheckpoint(Checkpoint):
    """A checkpoint whose folder holds ``model.pt``: a state dict, or a whole pickled module."""

    MODEL_FILENAME = "model.pt"
    #: the metadata key holding the pickled preprocessor (hex), Ray's own
    PREPROCESSOR_KEY = "preprocessor_pkl"

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Any], *, preprocessor: Any = None) -> "TorchCheckpoint":
        """A checkpoint of ``state_dict`` (``model.state_dict()``), in a new temporary folder."""
        if not isinstance(state_dict, dict):
            raise InvalidTypeError(f"TorchCheckpoint.from_state_dict({type(state_dict).__name__}): pass "
                                   "model.state_dict() (a dict).")
        return cls._of(state_dict, preprocessor)

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> "TorchCheckpoint":
        """A checkpoint of the whole module (pickled: load it only from a source you trust)."""
        return cls._of(model, preprocessor)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> "TorchCheckpoint":
        """The same folder as a ``TorchCheckpoint`` (``result.checkpoint`` of a run that saved one)."""
        return cls(checkpoint.path, checkpoint.filesystem)

    @classmethod
    def _of(cls, obj: Any, preprocessor: Any) -> "TorchCheckpoint":
        import torch

        folder = tempfile.mkdtemp(prefix="torch_checkpoint_")
        torch.save(obj, os.path.join(folder, cls.MODEL_FILENAME))
        checkpoint = cls.from_directory(folder)
        assert isinstance(checkpoint, TorchCheckpoint)
        if preprocessor is not None:
            checkpoint.set_preprocessor(preprocessor)
        return checkpoint

    def set_preprocessor(self, preprocessor: Any) -> None:
        """Store ``preprocessor`` (a fitted ``muster.data.preprocessors`` one) with the checkpoint, pickled
        into its metadata as Ray stores it."""
        try:
            blob = cloudpickle.dumps(preprocessor)
        except Exception as exc:
            raise InvalidTypeError(f"TorchCheckpoint.set_preprocessor({preprocessor!r}): it cannot be pickled "
                                   f"({type(exc).__name__}: {exc}); pass a muster.data.preprocessors one.") from exc
        self.update_metadata({self.PREPROCESSOR_KEY: blob.hex()})

    def get_preprocessor(self) -> Any:
        """The preprocessor stored with the checkpoint, or None. It is unpickled: load checkpoints only
        from a source you trust."""
        blob = self.get_metadata().get(self.PREPROCESSOR_KEY)
        return None if blob is None else cloudpickle.loads(bytes.fromhex(blob))

    def get_model(self, model: Any = None) -> Any:
        """The stored model: the module itself, or ``model`` with the stored state dict loaded into it.

        Raises:
            ValueError: the checkpoint holds a state dict and no ``model`` was given to load it into.
        """
        import torch

        with self.as_directory() as folder:
            stored = torch.load(os.path.join(folder, self.MODEL_FILENAME), map_location="cpu", weights_only=False)
        if isinstance(stored, torch.nn.Module):
            return stored
        if model is None:
            raise InvalidArgumentError("TorchCheckpoint.get_model(): the checkpoint holds a state dict; pass the "
                                       "model to load it into, get_model(MyModel()).")
        model.load_state_dict(stored)
        return model

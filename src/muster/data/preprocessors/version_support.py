"""Ray's ``ray.data.preprocessors.version_support``: the registry behind ``Preprocessor.serialize()``.

A class registered with ``@SerializablePreprocessor(version=, identifier=)`` serializes, as Ray 2.60's
built-ins do, to bytes: ``b"CPKL:"`` and the cloudpickle of ``{"type": identifier, "version": version,
"fields": ..., "stats": ..., "serializer_format_version": 1}``; ``Preprocessor.deserialize`` finds the class
by ``identifier``, makes it without calling ``__init__`` and restores its fields and ``stats_``. Any other
preprocessor serializes as Ray's base class does: a base64 string of its pickle.
"""

from __future__ import annotations

import base64
import binascii
import pickle
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.preprocessor import Preprocessor

MAGIC = b"CPKL:"
SERIALIZER_FORMAT_VERSION = 1
_REGISTRY: dict[str, "type[Preprocessor]"] = {}
P = TypeVar("P", bound=type)


class UnknownPreprocessorError(InvalidArgumentError):
    """``deserialize`` met a preprocessor type no class is registered for."""

    def __init__(self, preprocessor_type: str):
        self.preprocessor_type = preprocessor_type
        super().__init__(f"Unknown preprocessor type: {preprocessor_type!r}; register its class with "
                         "@SerializablePreprocessor(version=..., identifier=...) (and import its module) before "
                         "deserializing.")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.preprocessor_type,))


def SerializablePreprocessor(version: int, identifier: str) -> Callable[[P], P]:  # noqa: N802 (Ray's name)
    """Register a preprocessor class under ``identifier`` (stable across renames), at ``version``."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgumentError(f"SerializablePreprocessor(version={version!r}): use an integer >= 1.")
    if not isinstance(identifier, str) or not identifier:
        raise InvalidArgumentError(f"SerializablePreprocessor(identifier={identifier!r}): use a non-empty string, "
                                   "e.g. 'my_company.preprocessors.my_scaler'.")

    def register(cls: P) -> P:
        from muster.data.preprocessor import Preprocessor

        if not (isinstance(cls, type) and issubclass(cls, Preprocessor)):
            raise InvalidTypeError(f"@SerializablePreprocessor on {cls!r}: decorate a subclass of "
                                   "muster.data.preprocessor.Preprocessor.")
        cls.set_version(version)
        cls.set_preprocessor_class_id(identifier)
        _REGISTRY[identifier] = cls
        return cls

    return register


def _lookup_class(serialization_id: str) -> "type[Preprocessor]":
    import muster.data.preprocessors  # noqa: F401  (registers the built-ins)

    if serialization_id not in _REGISTRY:
        raise UnknownPreprocessorError(serialization_id)
    return _REGISTRY[serialization_id]


def pack(p: "Preprocessor") -> str | bytes:
    """``p.serialize()``: registered classes as ``CPKL:`` bytes of their fields, others as base64 pickle."""
    import muster.cloudpickle as cloudpickle

    if type(p).__dict__.get("_serialization_id") is None:  # not registered itself (a subclass is not)
        return base64.b64encode(pickle.dumps(p)).decode("ascii")
    data = {"type": type(p).get_preprocessor_class_id(), "version": type(p).get_version(),
            "fields": p._get_serializable_fields(), "stats": p._get_stats(),
            "serializer_format_version": SERIALIZER_FORMAT_VERSION}
    return MAGIC + cloudpickle.dumps(data)


def unpack(serialized: str | bytes) -> "Preprocessor":
    """``Preprocessor.deserialize``: the preprocessor ``pack`` made ``serialized`` from."""
    import muster.cloudpickle as cloudpickle

    preview = serialized[:50] if isinstance(serialized, (str, bytes)) else serialized
    if isinstance(serialized, str):
        try:
            obj: Preprocessor = pickle.loads(base64.b64decode(serialized, validate=True))
        except (binascii.Error, pickle.UnpicklingError, EOFError, ValueError) as e:
            raise InvalidArgumentError(f"Preprocessor.deserialize({preview!r}...): not a serialized preprocessor "
                                       "(pass what serialize() returned, unchanged).") from e
        return obj
    if not isinstance(serialized, bytes) or not serialized.startswith(MAGIC):
        raise InvalidArgumentError(f"Preprocessor.deserialize({preview!r}...): not a serialized preprocessor; pass "
                                   "the str or bytes serialize() returned, unchanged.")
    meta = cloudpickle.loads(serialized[len(MAGIC):])
    cls = _lookup_class(meta["type"])
    if meta.get("serializer_format_version") != SERIALIZER_FORMAT_VERSION:
        raise InvalidArgumentError(f"Preprocessor.deserialize: serializer format version "
                                   f"{meta.get('serializer_format_version')!r} is not supported (this muster reads "
                                   f"{SERIALIZER_FORMAT_VERSION}); serialize the preprocessor again here.")
    restored = cls.__new__(cls)
    restored._set_serializable_fields(fields=meta["fields"], version=meta["version"])
    restored._set_stats(stats=meta["stats"])
    return restored

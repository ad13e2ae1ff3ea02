"""Ray's ``ray.data.preprocessors`` (``from muster.data.preprocessors import StandardScaler``).

``fit(ds)`` computes the statistics with muster.data's aggregations or one streaming pass over the
dataset's batches; ``transform(ds)`` is lazy, one ``map_batches``; ``transform_batch(batch)`` applies a
fitted preprocessor to one DataFrame or dict of arrays. A fitted preprocessor pickles (send it to
training workers, or store it with ``TorchCheckpoint.from_model(model, preprocessor=p)``). The base
class, for your own, is :class:`muster.data.preprocessor.Preprocessor`.
"""

from __future__ import annotations

from typing import Any

from muster.data.preprocessor import Preprocessor, PreprocessorNotFittedException
from muster.data.preprocessors.chain import Chain
from muster.data.preprocessors.concatenator import Concatenator
from muster.data.preprocessors.discretizer import CustomKBinsDiscretizer, UniformKBinsDiscretizer
from muster.data.preprocessors.encoder import (Categorizer, LabelEncoder, MultiHotEncoder, OneHotEncoder,
                                               OrdinalEncoder)
from muster.data.preprocessors.hasher import FeatureHasher
from muster.data.preprocessors.imputer import SimpleImputer
from muster.data.preprocessors.normalizer import Normalizer
from muster.data.preprocessors.scaler import MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler
from muster.data.preprocessors.tokenizer import Tokenizer
from muster.data.preprocessors.torch import TorchVisionPreprocessor
from muster.data.preprocessors.transformer import PowerTransformer
from muster.data.preprocessors.vectorizer import CountVectorizer, HashingVectorizer

__all__ = [
    "Categorizer", "Chain", "Concatenator", "CountVectorizer", "CustomKBinsDiscretizer", "FeatureHasher",
    "HashingVectorizer", "LabelEncoder", "MaxAbsScaler", "MinMaxScaler", "MultiHotEncoder", "Normalizer",
    "OneHotEncoder", "OrdinalEncoder", "PowerTransformer", "Preprocessor", "PreprocessorNotFittedException",
    "RobustScaler", "SimpleImputer", "StandardScaler", "Tokenizer", "TorchVisionPreprocessor",
    "UniformKBinsDiscretizer",
]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.preprocessors", name)

"""``Preprocessor.serialize()`` / ``Preprocessor.deserialize()`` as in Ray 2.60: every built-in round-trips fitted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import muster.data as md
from muster.data import preprocessors as pp
from muster.data.preprocessor import Preprocessor, SerializablePreprocessorBase
from muster.data.preprocessors.version_support import SerializablePreprocessor, UnknownPreprocessorError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

DF = pd.DataFrame({"a": [1, 2, 3, 4, 10], "b": [2.0, -4.0, 6.0, 0.0, 1.0], "c": ["x", "y", "x", "z", "x"],
                   "t": ["a b", "b c c", "a", "c a", "b"], "bins": [0.5, 1.5, 2.5, 3.5, 4.5]})
DF["l"] = [["x"], ["y", "x"], [], ["z"], ["x"]]

BUILT_INS = [
    lambda: pp.StandardScaler(["a", "b"]), lambda: pp.MinMaxScaler(["a"]), lambda: pp.MaxAbsScaler(["b"]),
    lambda: pp.RobustScaler(["a", "b"]), lambda: pp.SimpleImputer(["b"], strategy="most_frequent"),
    lambda: pp.OrdinalEncoder(["c"]), lambda: pp.OneHotEncoder(["c"]), lambda: pp.MultiHotEncoder(["l"]),
    lambda: pp.LabelEncoder("c"), lambda: pp.Categorizer(["c"]), lambda: pp.Concatenator(["a", "b"]),
    lambda: pp.Normalizer(["a", "b"]), lambda: pp.UniformKBinsDiscretizer(["b"], bins=3),
    lambda: pp.CustomKBinsDiscretizer(["bins"], bins=[0, 2, 5]),
    lambda: pp.Tokenizer(["t"], tokenization_fn=lambda s: s.upper().split()),  # a lambda: cloudpickle carries it
    lambda: pp.HashingVectorizer(["t"], num_features=4), lambda: pp.CountVectorizer(["t"]),
    lambda: pp.FeatureHasher(["a", "b"], num_features=3, output_column="h"),
    lambda: pp.PowerTransformer(["a"], power=0.5),
    lambda: pp.Chain(pp.SimpleImputer(["b"]), pp.StandardScaler(["a", "b"]), pp.OrdinalEncoder(["c"])),
]


def _plain(batch):
    """A transform_batch result (DataFrame, Table or dict of arrays) as comparable Python values."""
    if isinstance(batch, pa.Table):
        batch = batch.to_pandas()
    items = batch.items() if isinstance(batch, dict) else ((c, batch[c]) for c in batch.columns)
    return {k: [np.asarray(v).tolist() if isinstance(v, np.ndarray) else v for v in np.asarray(col, dtype=object)]
            for k, col in items}


@pytest.mark.parametrize("make", BUILT_INS, ids=lambda m: type(m()).__name__)
def test_fitted_built_in_round_trips_and_transforms_identically(make):
    p = make().fit(md.from_pandas(DF).repartition(2))
    data = p.serialize()
    assert isinstance(data, bytes) and data.startswith(b"CPKL:")  # Ray 2.60's format for its built-ins
    q = Preprocessor.deserialize(data)
    assert type(q) is type(p) and q is not p and q.fit_status() == p.fit_status()
    assert repr(q) == repr(p) and q.stats_.keys() == p.stats_.keys()
    assert _plain(q.transform_batch(DF)) == _plain(p.transform_batch(DF))
    assert _plain(q.transform(md.from_pandas(DF)).to_pandas()) == _plain(p.transform(md.from_pandas(DF)).to_pandas())


def test_unfitted_restores_unfitted_and_class_ids():
    q = Preprocessor.deserialize(pp.StandardScaler(["a"]).serialize())
    assert q.fit_status() == Preprocessor.FitStatus.NOT_FITTED
    assert pp.StandardScaler.get_preprocessor_class_id() == "io.muster.preprocessors.standard_scaler"
    assert pp.StandardScaler.get_version() == 1


class _Doubler(Preprocessor):
    _is_fittable = False

    def __init__(self, column):
        super().__init__()
        self.column = column

    def _transform_pandas(self, df):
        return df.assign(**{self.column: df[self.column] * 2})


@SerializablePreprocessor(version=2, identifier="tests.shift")
class _Shift(SerializablePreprocessorBase):
    def __init__(self, column):
        super().__init__()
        self.column = column

    def _fit(self, ds):
        self.stats_ = {"min": ds.min(self.column)}
        return self

    def _transform_pandas(self, df):
        return df.assign(**{self.column: df[self.column] - self.stats_["min"]})

    def _set_serializable_fields(self, fields, version):
        self.seen_version = version
        super()._set_serializable_fields(fields, version)


def test_own_preprocessors_unregistered_as_base64_string_registered_by_fields():
    text = _Doubler("a").serialize()
    assert isinstance(text, str)  # Ray's base Preprocessor: base64 of its pickle
    assert list(Preprocessor.deserialize(text).transform_batch(DF)["a"]) == [2, 4, 6, 8, 20]
    shift = _Shift("a").fit(md.from_pandas(DF))
    back = Preprocessor.deserialize(shift.serialize())
    assert isinstance(back, _Shift) and back.seen_version == 2 and back.stats_ == {"min": 1}
    assert list(back.transform_batch(DF)["a"]) == [0, 1, 2, 3, 9]


def test_bad_input_names_the_fix():
    with pytest.raises(InvalidArgumentError, match="not a serialized preprocessor"):
        Preprocessor.deserialize(b"garbage")
    with pytest.raises(InvalidArgumentError, match="not a serialized preprocessor"):
        Preprocessor.deserialize("not base64!")
    import muster.cloudpickle as cloudpickle

    alien = b"CPKL:" + cloudpickle.dumps({"type": "io.ray.preprocessors.standard_scaler", "version": 1,
                                          "fields": {}, "stats": {}, "serializer_format_version": 1})
    with pytest.raises(UnknownPreprocessorError, match="io.ray.preprocessors.standard_scaler"):
        Preprocessor.deserialize(alien)
    with pytest.raises(InvalidTypeError, match="subclass of"):
        SerializablePreprocessor(version=1, identifier="x")(dict)

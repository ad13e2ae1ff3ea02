"""muster.data.preprocessors: Ray's preprocessors on muster datasets, checked against numpy/pandas."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

import muster.data as md
from muster.data.preprocessor import Preprocessor
from muster.data.preprocessors import (Categorizer, Chain, Concatenator, CustomKBinsDiscretizer, LabelEncoder,
                                       MaxAbsScaler, MinMaxScaler, Normalizer, OneHotEncoder, OrdinalEncoder,
                                       PreprocessorNotFittedException, RobustScaler, SimpleImputer, StandardScaler,
                                       UniformKBinsDiscretizer)
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError

A = np.array([1, 2, 3, 4, 10])
B = np.array([2.0, -4.0, 6.0, 0.0, 1.0])
C = ["x", "y", "x", "z", "x"]


@pytest.fixture
def df():
    return pd.DataFrame({"a": A, "b": B, "c": C})


@pytest.fixture
def ds(df):
    return md.from_pandas(df).repartition(2)  # two blocks: statistics merge across them


def test_standard_scaler_uses_population_std_and_keeps_other_columns(ds):
    p = StandardScaler(["a", "b"])
    out = p.fit_transform(ds).to_pandas()
    assert p.stats_ == pytest.approx({"mean(a)": A.mean(), "mean(b)": B.mean(), "std(a)": A.std(), "std(b)": B.std()})
    np.testing.assert_allclose(out["a"], (A - A.mean()) / A.std())
    np.testing.assert_allclose(out["b"], (B - B.mean()) / B.std())
    assert list(out["c"]) == C and list(out.columns) == ["a", "b", "c"]
    assert repr(p) == "StandardScaler(columns=['a', 'b'], output_columns=['a', 'b'])"


def test_scalers_write_output_columns_beside_the_inputs(ds):
    out = StandardScaler(["a"], output_columns=["a_scaled"]).fit_transform(ds).to_pandas()
    assert list(out.columns) == ["a", "b", "c", "a_scaled"] and list(out["a"]) == list(A)
    with pytest.raises(InvalidArgumentError, match="one output column per input column"):
        StandardScaler(["a"], output_columns=["x", "y"])
    with pytest.raises(InvalidTypeError, match=r"columns=\['a'\]"):
        StandardScaler("a")  # type: ignore[arg-type]


def test_min_max_max_abs_and_robust_scalers(ds):
    mm, ma, rs = MinMaxScaler(["a", "b"]), MaxAbsScaler(["a", "b"]), RobustScaler(["a", "b"], quantile_range=(0.2, 0.8))
    mm_out, ma_out, rs_out = (p.fit_transform(ds).to_pandas() for p in (mm, ma, rs))
    assert mm.stats_ == {"min(a)": 1, "min(b)": -4.0, "max(a)": 10, "max(b)": 6.0}
    np.testing.assert_allclose(mm_out["a"], (A - A.min()) / (A.max() - A.min()))
    assert ma.stats_ == {"abs_max(a)": 10, "abs_max(b)": 6.0}
    np.testing.assert_allclose(ma_out["b"], B / np.abs(B).max())
    low, med, high = np.quantile(B, [0.2, 0.5, 0.8])
    assert rs.stats_["low_quantile(b)"] == pytest.approx(low) and rs.stats_["median(b)"] == pytest.approx(med)
    np.testing.assert_allclose(rs_out["b"], (B - med) / (high - low))


def test_constant_column_is_shifted_not_divided_by_zero():
    ds = md.from_items([{"k": 5.0}] * 3)
    assert list(StandardScaler(["k"]).fit_transform(ds).to_pandas()["k"]) == [0.0] * 3
    assert list(MinMaxScaler(["k"]).fit_transform(ds).to_pandas()["k"]) == [0.0] * 3


def test_transform_before_fit_names_the_preprocessor_and_fit(ds, df):
    p = StandardScaler(["a"])
    for call in (lambda: p.transform(ds), lambda: p.transform_batch(df)):
        with pytest.raises(PreprocessorNotFittedException, match=r"StandardScaler\(columns=\['a'\].*call fit\(ds\)"):
            call()
    assert issubclass(PreprocessorNotFittedException, RuntimeError) and issubclass(PreprocessorNotFittedException,
                                                                                   MusterError)
    with pytest.raises(InvalidTypeError, match="transform_batch"):
        p.fit(ds).transform(df)


def test_refit_replaces_stats_with_a_warning(ds):
    p = StandardScaler(["a"]).fit(ds)
    with pytest.warns(UserWarning, match="already called"):
        p.fit(md.from_items([{"a": 0.0}, {"a": 2.0}]))
    assert p.stats_ == {"mean(a)": 1.0, "std(a)": 1.0}


def test_transform_is_lazy_and_reads_stats_when_it_runs(threads_only):
    calls = []

    def seen(row):
        calls.append(1)
        return row

    ds = md.from_items([{"a": float(i)} for i in range(4)])
    p = MinMaxScaler(["a"]).fit(ds)
    out = p.transform(ds.map(seen))
    assert calls == [] and isinstance(out, md.Dataset)
    assert out.take_batch(4)["a"].tolist() == [0.0, 1 / 3, 2 / 3, 1.0] and len(calls) == 4


def test_transform_batch_formats_as_in_ray(df):
    p = StandardScaler(["a"]).fit(md.from_pandas(df))
    expected = (A - A.mean()) / A.std()
    out = p.transform_batch(df)  # a DataFrame comes back as one, the one given untouched
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["a", "b", "c"]
    np.testing.assert_allclose(out["a"], expected)
    assert list(df["a"]) == list(A)
    table = p.transform_batch({"a": A, "b": B})  # StandardScaler computes in Arrow: a dict gives a Table
    np.testing.assert_allclose(table.column("a").to_numpy(), expected)
    mm = MinMaxScaler(["a"]).fit(md.from_pandas(df))  # pandas preprocessors give a DataFrame
    assert isinstance(mm.transform_batch({"a": A}), pd.DataFrame)
    with pytest.raises(InvalidTypeError, match="DataFrame"):
        p.transform_batch([1, 2])


def test_fitted_preprocessor_pickles_and_transforms_after(ds, df):
    p = Chain(StandardScaler(["a"]), OneHotEncoder(["c"]), Concatenator(["a", "b"], dtype=np.float32))
    p.fit(ds)
    again = pickle.loads(pickle.dumps(p))
    assert again.preprocessors[0].stats_ == p.preprocessors[0].stats_
    pd.testing.assert_frame_equal(again.transform(ds).to_pandas().drop(columns="concat_out"),
                                  p.transform(ds).to_pandas().drop(columns="concat_out"))


def test_one_hot_encoder_makes_one_uint8_vector_column(ds):
    p = OneHotEncoder(["c"])
    out = p.fit_transform(ds)
    assert p.stats_ == {"unique_values(c)": {"x": 0, "y": 1, "z": 2}}
    batch = out.take_batch(5)
    expected = np.array([[c == k for k in "xyz"] for c in C], dtype=np.uint8)
    np.testing.assert_array_equal(batch["c"], expected)
    assert batch["c"].dtype == np.uint8 and str(out.schema().types[2]) == "fixed_size_list<item: uint8>[3]"
    top = OneHotEncoder(["c"], max_categories={"c": 1}).fit(ds)
    assert top.stats_ == {"unique_values(c)": {"x": 0}}
    unseen = p.transform(md.from_items([{"c": "q"}])).take_batch(1)["c"]
    assert unseen.tolist() == [[0, 0, 0]]


def test_ordinal_and_label_encoders(ds, df):
    ordinal = OrdinalEncoder(["c"]).fit(ds)
    assert ordinal.stats_ == {"unique_values(c)": {"x": 0, "y": 1, "z": 2}}
    assert ordinal.transform(ds).take_batch(5)["c"].tolist() == [0, 1, 0, 2, 0]
    assert ordinal.transform(md.from_items([{"c": "q"}])).take_all() == [{"c": None}]
    lists = md.from_items([{"t": ["a", "b"]}, {"t": ["b"]}])
    assert OrdinalEncoder(["t"]).fit_transform(lists).take_all() == [{"t": [0, 1]}, {"t": [1]}]
    assert OrdinalEncoder(["t"], encode_lists=False).fit(lists).stats_ == {"unique_values(t)": {("a", "b"): 0,
                                                                                                 ("b",): 1}}
    label = LabelEncoder("c", output_column="y")
    encoded = label.fit_transform(ds)
    assert encoded.to_pandas()["y"].tolist() == [0, 1, 0, 2, 0]
    assert label.inverse_transform(encoded.drop_columns(["c"])).to_pandas()["c"].tolist() == C


def test_encoders_refuse_nulls_naming_the_fix():
    ds = md.from_items([{"c": "x"}, {"c": None}])
    with pytest.raises(InvalidArgumentError, match="'c' holds null values.*SimpleImputer"):
        OneHotEncoder(["c"]).fit(ds)
    with pytest.raises(InvalidArgumentError, match=r"\['zz'\] are not in the dataset"):
        OrdinalEncoder(["zz"]).fit(ds)


def test_categorizer_makes_pandas_categoricals(ds):
    p = Categorizer(["c"])
    out = p.fit_transform(ds).to_pandas()
    assert list(p.stats_["c"].categories) == ["x", "y", "z"]
    assert isinstance(out["c"].dtype, pd.CategoricalDtype) and list(out["c"]) == C


def test_simple_imputer_strategies():
    ds = md.from_pandas(pd.DataFrame({"a": [1.0, None, 3.0, 3.0], "c": ["x", None, "y", "y"]}))
    mean = SimpleImputer(["a"])
    assert mean.fit_transform(ds).to_pandas()["a"].tolist() == pytest.approx([1.0, 7 / 3, 3.0, 3.0])
    assert mean.stats_ == pytest.approx({"mean(a)": 7 / 3})
    freq = SimpleImputer(["a", "c"], strategy="most_frequent")
    out = freq.fit_transform(ds).to_pandas()
    assert freq.stats_ == {"most_frequent(a)": 3.0, "most_frequent(c)": "y"}
    assert out["c"].tolist() == ["x", "y", "y", "y"]
    const = SimpleImputer(["a"], strategy="constant", fill_value=0.0)
    assert const.fit_status() == Preprocessor.FitStatus.NOT_FITTABLE
    assert const.transform(ds).to_pandas()["a"].tolist() == [1.0, 0.0, 3.0, 3.0]
    with pytest.raises(InvalidArgumentError, match="'median'.*most_frequent"):
        SimpleImputer(["a"], strategy="median")
    with pytest.raises(InvalidArgumentError, match="fill_value="):
        SimpleImputer(["a"], strategy="constant")


def test_concatenator_stacks_columns_into_a_tensor_column(ds):
    p = Concatenator(["a", "b"], output_column_name="features", dtype=np.float32)
    assert repr(p) == "Concatenator(output_column_name=features, columns=['a', 'b'], dtype=<class 'numpy.float32'>)"
    batch = p.transform(ds).take_batch(5)
    assert list(batch) == ["c", "features"] and batch["features"].dtype == np.float32
    np.testing.assert_array_equal(batch["features"], np.column_stack([A, B]).astype(np.float32))
    torch_batch = next(iter(p.transform(ds.drop_columns(["c"])).iter_torch_batches(batch_size=5)))
    assert tuple(torch_batch["features"].shape) == (5, 2)
    with pytest.raises(MusterError, match=r"\['zz'\] are not in the batch"):
        Concatenator(["a", "zz"], raise_if_missing=True).transform(ds).take_all()
    flat = Concatenator(["v", "s"], flatten=True).transform(md.from_items([{"v": np.array([1.0, 2.0]), "s": 3.0}]))
    assert flat.take_batch(1)["concat_out"].tolist() == [[1.0, 2.0, 3.0]]


def test_normalizer_norms(ds):
    rows = np.column_stack([A, B]).astype(float)
    for norm, size in (("l2", np.linalg.norm(rows, axis=1)), ("l1", np.abs(rows).sum(1)), ("max", np.abs(rows).max(1))):
        out = Normalizer(["a", "b"], norm=norm).transform(ds).to_pandas()
        np.testing.assert_allclose(out[["a", "b"]].to_numpy(), rows / size[:, None])
    with pytest.raises(InvalidArgumentError, match="'l3'"):
        Normalizer(["a"], norm="l3")


def test_discretizers_bin_as_pandas_cut(ds):
    p = UniformKBinsDiscretizer(["a"], bins=3)
    out = p.fit_transform(ds).to_pandas()
    np.testing.assert_allclose(p.stats_["a"], [0.991, 4.0, 7.0, 10.0])
    assert out["a"].tolist() == pd.cut(A, p.stats_["a"], labels=False).tolist() == [0, 0, 0, 0, 2]
    custom = CustomKBinsDiscretizer(["b"], bins=[-10, 0, 10])
    assert custom.transform(ds).to_pandas()["b"].tolist() == [1, 0, 1, 0, 1]


def test_chain_fits_each_step_on_the_previous_output(ds, df):
    chain = Chain(SimpleImputer(["a"]), StandardScaler(["a"]), Concatenator(["a", "b"]))
    assert chain.fit_status() == Preprocessor.FitStatus.NOT_FITTED
    out = chain.fit_transform(ds).take_batch(5)["concat_out"]
    np.testing.assert_allclose(out[:, 0], (A - A.mean()) / A.std())
    assert chain.fit_status() == Preprocessor.FitStatus.FITTED and chain.stats_ == {}
    assert chain.transform_batch(df)["concat_out"].iloc[0].tolist() == pytest.approx(out[0].tolist())
    assert repr(chain).startswith("Chain(SimpleImputer(columns=['a'], strategy='mean'")
    partly = Chain(StandardScaler(["a"]).fit(ds), MinMaxScaler(["b"]))
    with pytest.raises(PreprocessorNotFittedException):
        partly.transform(ds)

"""muster.data.preprocessors' MultiHotEncoder, Tokenizer, HashingVectorizer, CountVectorizer, FeatureHasher and
PowerTransformer: the expected values are what Ray 2.60 gave on the same input (hard-coded; Ray is not imported)."""

from __future__ import annotations

import string

import numpy as np
import pandas as pd
import pytest

import muster.data as md
from muster.data.preprocessors import (Chain, CountVectorizer, FeatureHasher, HashingVectorizer, MultiHotEncoder,
                                       PowerTransformer, Tokenizer)
from muster.data.preprocessors.utils import simple_hash
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError

CORPUS = ["Jimmy likes volleyball", "Bob likes volleyball too", "Bob also likes fruit jerky"]


@pytest.fixture
def corpus():
    return md.from_pandas(pd.DataFrame({"corpus": CORPUS})).repartition(2)  # the vocabulary merges two blocks


def _column(ds, name):
    return [None if v is None else list(v) for v in ds.to_pandas()[name]]


def test_multi_hot_encoder_counts_each_category_as_ray_does():
    genres = [["comedy", "action", "sports"], ["animation", "comedy", "action"], ["documentary"], ["comedy", "comedy"]]
    ds = md.from_pandas(pd.DataFrame({"name": list("abcd"), "genre": genres, "tag": ["x", "y", "x", "z"]}))
    p = MultiHotEncoder(["genre", "tag"])
    out = p.fit_transform(ds)
    # Ray 2.60's stats_, rows and schema on this input
    assert p.stats_ == {"unique_values(genre)": {"action": 0, "animation": 1, "comedy": 2, "documentary": 3,
                                                 "sports": 4},
                        "unique_values(tag)": {"x": 0, "y": 1, "z": 2}}
    assert _column(out, "genre") == [[1, 0, 1, 0, 1], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 2, 0, 0]]
    assert _column(out, "tag") == [[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]]  # a scalar is a list of one
    assert [str(t) for t in out.schema().types] == ["large_string", "list<item: int64>", "list<item: int64>"]
    unseen = p.transform_batch(pd.DataFrame({"genre": [["horror", "comedy"]], "tag": ["q"]}))
    assert unseen.to_dict("list") == {"genre": [[0, 0, 1, 0, 0]], "tag": [[0, 0, 0]]}  # as Ray 2.60
    top = MultiHotEncoder(["genre"], max_categories={"genre": 2}, output_columns=["g2"])
    out = top.fit_transform(ds)
    assert top.stats_ == {"unique_values(genre)": {"action": 0, "comedy": 1}}  # Ray 2.60's
    assert _column(out, "g2") == [[1, 1], [1, 1], [0, 0], [0, 2]] and out.columns() == ["name", "genre", "tag", "g2"]
    assert repr(top) == "MultiHotEncoder(columns=['genre'], max_categories={'genre': 2}, output_columns=['g2'])"


def test_multi_hot_encoder_refuses_bad_input_naming_the_fix():
    with pytest.raises(InvalidArgumentError, match=r"\['q'\] are not in columns=\['g'\]"):
        MultiHotEncoder(["g"], max_categories={"q": 1})
    with pytest.raises(InvalidArgumentError, match=r"\['zz'\] are not in the dataset"):
        MultiHotEncoder(["zz"]).fit(md.from_items([{"g": ["a"]}]))
    with pytest.raises(InvalidArgumentError, match="'g' holds null values.*impute them first"):
        MultiHotEncoder(["g"]).fit(md.from_items([{"g": "a"}, {"g": None}]))
    with pytest.raises(InvalidTypeError, match="columns=\\['g'\\]"):
        MultiHotEncoder("g")  # type: ignore[arg-type]


def test_tokenizer_splits_on_spaces_or_with_the_function_given():
    ds = md.from_pandas(pd.DataFrame({"text": ["Hello, world!", "foo bar\nbaz", "a  b"], "n": [1, 2, 3]}))
    p = Tokenizer(["text"])
    out = p.transform(ds)
    # Ray 2.60: single spaces only, so two spaces give an empty token
    assert _column(out, "text") == [["Hello,", "world!"], ["foo", "bar\nbaz"], ["a", "", "b"]]
    assert [str(t) for t in out.schema().types] == ["list<item: string>", "int64"]
    assert repr(p) == "Tokenizer(columns=['text'], tokenization_fn=simple_split_tokenizer, output_columns=['text'])"

    def tokenization_fn(s):
        for character in string.punctuation:
            s = s.replace(character, "")
        return s.split()

    custom = Tokenizer(["text"], tokenization_fn=tokenization_fn, output_columns=["tok"])
    out = custom.transform(ds)
    assert _column(out, "tok") == [["Hello", "world"], ["foo", "bar", "baz"], ["a", "b"]]  # as Ray 2.60
    assert out.to_pandas()["text"].tolist() == ["Hello, world!", "foo bar\nbaz", "a  b"]
    assert repr(custom).endswith("tokenization_fn=tokenization_fn, output_columns=['tok'])")
    assert isinstance(p.transform_batch({"text": np.array(["x y"])}), pd.DataFrame)  # a pandas one, as in Ray


def test_tokenizer_refuses_bad_input_naming_the_fix():
    ds = md.from_pandas(pd.DataFrame({"text": ["a b"], "n": [1]}))
    with pytest.raises(MusterError, match=r"column 'n' holds 1 \(int\), not text.*pass a tokenization_fn"):
        Tokenizer(["n"]).transform(ds).take_all()
    with pytest.raises(MusterError, match=r"\['zz'\] are not in the batch, whose columns are \['text', 'n'\]"):
        Tokenizer(["zz"]).transform(ds).take_all()
    with pytest.raises(InvalidTypeError, match="tokenization_fn='split'.*str.split"):
        Tokenizer(["text"], tokenization_fn="split")  # type: ignore[arg-type]
    assert Tokenizer(["n"], tokenization_fn=lambda v: [str(v)]).transform(ds).take_all()[0]["n"] == ["1"]


def test_hashing_vectorizer_hashes_as_ray(corpus):
    p = HashingVectorizer(["corpus"], num_features=8)
    out = p.transform(corpus)
    # Ray 2.60's rows: the buckets come from SHA-256, so they are the same in both
    assert _column(out, "corpus") == [[0, 0, 1, 1, 0, 0, 1, 0], [1, 1, 0, 1, 0, 0, 1, 0], [1, 1, 0, 2, 1, 0, 0, 0]]
    assert str(out.schema().types[0]) == "list<item: int64>"
    assert simple_hash("likes", 8) == 3
    appended = HashingVectorizer(["corpus"], num_features=5, output_columns=["h"]).transform(corpus)
    assert _column(appended, "h") == [[0, 1, 0, 2, 0], [1, 1, 0, 2, 0], [1, 0, 2, 2, 0]]
    assert appended.to_pandas()["corpus"].tolist() == CORPUS
    assert repr(p) == ("HashingVectorizer(columns=['corpus'], num_features=8, tokenization_fn=simple_split_tokenizer, "
                       "output_columns=['corpus'])")
    with pytest.raises(InvalidArgumentError, match="num_features=0.*at least 1"):
        HashingVectorizer(["corpus"], num_features=0)
    with pytest.raises(InvalidTypeError, match="num_features='8'.*whole number"):
        HashingVectorizer(["corpus"], num_features="8")  # type: ignore[arg-type]


def test_count_vectorizer_counts_the_vocabulary_most_frequent_first(corpus):
    p = CountVectorizer(["corpus"])
    out = p.fit_transform(corpus)
    # Ray 2.60's stats_ (a Counter, most frequent first, ties in order of first appearance) and rows
    assert list(p.stats_["token_counts(corpus)"].items()) == [("likes", 3), ("volleyball", 2), ("Bob", 2),
                                                              ("Jimmy", 1), ("too", 1), ("also", 1), ("fruit", 1),
                                                              ("jerky", 1)]
    assert _column(out, "corpus") == [[1, 1, 0, 1, 0, 0, 0, 0], [1, 1, 1, 0, 1, 0, 0, 0], [1, 0, 1, 0, 0, 1, 1, 1]]
    assert str(out.schema().types[0]) == "list<item: int64>"
    top = CountVectorizer(["corpus"], max_features=3, output_columns=["counts"])
    out = top.fit_transform(corpus)
    assert dict(top.stats_["token_counts(corpus)"]) == {"likes": 3, "volleyball": 2, "Bob": 2}
    assert _column(out, "counts") == [[1, 1, 0], [1, 1, 1], [1, 0, 1]]
    assert repr(top) == ("CountVectorizer(columns=['corpus'], tokenization_fn=simple_split_tokenizer, max_features=3, "
                         "output_columns=['counts'])")


def test_vectorizers_keep_a_missing_document_null():
    ds = md.from_pandas(pd.DataFrame({"t": ["a b", None, "b c b"]})).repartition(2)
    assert _column(Tokenizer(["t"]).transform(ds), "t") == [["a", "b"], None, ["b", "c", "b"]]
    assert _column(HashingVectorizer(["t"], 4).transform(ds), "t") == [[0, 1, 0, 1], None, [0, 2, 1, 0]]
    p = CountVectorizer(["t"])
    assert _column(p.fit_transform(ds), "t") == [[1, 1, 0], None, [2, 0, 1]]
    assert list(p.stats_["token_counts(t)"].items()) == [("b", 3), ("a", 1), ("c", 1)]
    assert _column(CountVectorizer(["t"], max_features=0).fit_transform(ds), "t") == [[], None, []]


def test_count_vectorizer_refuses_bad_input_naming_the_fix(corpus):
    with pytest.raises(InvalidArgumentError, match=r"\['body'\] are not in the dataset, whose columns are \['corpus"):
        CountVectorizer(["body"]).fit(corpus)
    with pytest.raises(InvalidTypeError, match=r"column 'n' holds 1 \(int\), not text"):
        CountVectorizer(["n"]).fit(md.from_items([{"n": 1}]))
    with pytest.raises(InvalidArgumentError, match="max_features=-1"):
        CountVectorizer(["corpus"], max_features=-1)


def test_feature_hasher_sums_columns_by_their_hashed_names():
    ds = md.from_pandas(pd.DataFrame({"I": [1, 1], "like": [1, 0], "dislike": [0, 1], "Python": [1, 1]}))
    p = FeatureHasher(["I", "like", "dislike", "Python"], num_features=8, output_column="hashed")
    out = p.transform(ds)
    batch = out.take_batch(2)
    # Ray 2.60's rows: a tensor column of int64 (Ray's ArrowTensorTypeV2(shape=(8,), dtype=int64))
    np.testing.assert_array_equal(batch["hashed"], [[0, 0, 0, 1, 1, 0, 0, 1], [0, 0, 0, 1, 1, 0, 0, 1]])
    assert batch["hashed"].dtype == np.int64 and out.columns() == ["I", "like", "dislike", "Python", "hashed"]
    assert repr(p) == ("FeatureHasher(columns=['I', 'like', 'dislike', 'Python'], num_features=8, "
                       "output_column='hashed')")
    floats = md.from_pandas(pd.DataFrame({"I": [0.5, 2.0], "like": [1.5, 3.0]}))
    summed = FeatureHasher(["I", "like"], num_features=3, output_column="h").transform(floats).take_batch(2)["h"]
    np.testing.assert_array_equal(summed, [[0.0, 2.0, 0.0], [0.0, 5.0, 0.0]])  # Ray 2.60's (both hash to 1)
    assert summed.dtype == np.float64
    with pytest.raises(MusterError, match=r"\{'name': 'str'\} are not numeric.*CountVectorizer"):
        FeatureHasher(["name"], 2, "o").transform(md.from_items([{"name": "x"}])).take_all()
    with pytest.raises(InvalidTypeError, match="output_column=3"):
        FeatureHasher(["I"], 2, 3)  # type: ignore[arg-type]


# Ray 2.60's PowerTransformer on A = [1.2, 2.5, 0.0, -1.5], B = [0.5, 1.0, 2.0, 4.0]
YEO_JOHNSON = {
    0.5: {"A": [0.9664793948382653, 1.7416573867739413, 0.0, -1.9685647168069826],
          "B": [0.4494897427831779, 0.8284271247461903, 1.4641016151377544, 2.4721359549995796]},
    0: {"A": [0.7884573603642703, 1.252762968495368, 0.0, -2.625],
        "B": [0.4054651081081644, 0.6931471805599453, 1.0986122886681098, 1.6094379124341003]},
    2: {"A": [1.9200000000000004, 5.625, 0.0, -0.9162907318741551], "B": [0.625, 1.5, 4.0, 12.0]},
    -1.5: {"A": [0.4623636780414418, 0.5648528602238384, -0.0, -6.77294120573299],
           "B": [0.3037792973654551, 0.43096440627115085, 0.5383666068467498, 0.6070381872666722]},
}
BOX_COX = {0.5: [-0.5857864376269049, 0.0, 0.8284271247461903, 2.0],
           0: [-0.6931471805599453, 0.0, 0.6931471805599453, 1.3862943611198906]}


def test_power_transformer_matches_ray():
    ds = md.from_pandas(pd.DataFrame({"A": [1.2, 2.5, 0.0, -1.5], "B": [0.5, 1.0, 2.0, 4.0]}))
    for power, expected in YEO_JOHNSON.items():
        out = PowerTransformer(["A", "B"], power=power).transform(ds).to_pandas()
        assert out.to_dict("list") == expected, power  # bit for bit: the same float operations
    for power, expected_b in BOX_COX.items():
        out = PowerTransformer(["B"], power=power, method="box-cox", output_columns=["B2"]).transform(ds).to_pandas()
        assert out["B2"].tolist() == expected_b and out.columns.tolist() == ["A", "B", "B2"]
    p = PowerTransformer(["A"], power=1)
    assert repr(p) == "PowerTransformer(columns=['A'], power=1, method='yeo-johnson', output_columns=['A'])"
    assert PowerTransformer(["A"], power=1).transform(md.from_items([{"A": 1}])).schema().types[0] == "double"


def test_power_transformer_refuses_bad_input_naming_the_fix():
    with pytest.raises(InvalidArgumentError, match="method='log'.*yeo-johnson"):
        PowerTransformer(["A"], power=1, method="log")
    with pytest.raises(InvalidTypeError, match="power='2'.*pass a number"):
        PowerTransformer(["A"], power="2")  # type: ignore[arg-type]
    with pytest.raises(MusterError, match=r"\{'c': 'str'\} are not numeric.*OrdinalEncoder"):
        PowerTransformer(["c"], power=1).transform(md.from_items([{"c": "x"}])).take_all()
    with pytest.raises(MusterError, match=r"\['zz'\] are not in the batch"):
        PowerTransformer(["zz"], power=1).transform(md.from_items([{"c": 1.0}])).take_all()


def test_text_preprocessors_chain_and_pickle():
    import pickle

    ds = md.from_pandas(pd.DataFrame({"t": CORPUS, "x": [1.0, 2.0, 3.0]}))
    chain = Chain(CountVectorizer(["t"], max_features=2), PowerTransformer(["x"], power=0))
    again = pickle.loads(pickle.dumps(chain.fit(ds)))
    out = again.transform(ds).to_pandas()
    assert [list(v) for v in out["t"]] == [[1, 1], [1, 1], [1, 0]]
    np.testing.assert_allclose(out["x"], np.log([2.0, 3.0, 4.0]))

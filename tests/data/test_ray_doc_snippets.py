"""Ray Data's documentation snippets, ported by `import muster as ray`: what each one showed
wrong or refused before its fix (each test names the page it comes from)."""

from __future__ import annotations

import os

import pandas as pd

import muster.data as md


def _files(root: str) -> dict[str, int]:
    """Each folder under ``root`` (relative) -> how many files it holds."""
    return {os.path.relpath(d, root): len(files) for d, _, files in os.walk(root) if files}


def test_repartition_by_keys_puts_each_key_in_one_block(tmp_path):
    """saving-data.rst: repartition(keys=[...], num_blocks=4) then a partitioned write gives one file
    per partition. Before, keys were ignored: blocks were cut by position and each partition got a file
    from every block holding its rows."""
    df = pd.DataFrame({"city": ["SF", "SF", "NYC", "NYC", "SF", "NYC", "SF", "NYC"],
                       "year": [2023, 2024, 2023, 2024, 2023, 2023, 2024, 2024],
                       "sales": [100, 120, 90, 115, 105, 95, 130, 110]})
    ds = md.from_pandas(df).repartition(keys=["city", "year"], num_blocks=4)
    blocks = [b for b in ds.materialize()._execute() if b.num_rows]
    keys = [set(zip(b.column("city").to_pylist(), b.column("year").to_pylist())) for b in blocks]
    assert all(len(k) == 1 for k in keys) and len(blocks) == 4  # each key whole in one block
    assert sorted(r["sales"] for r in ds.take_all()) == sorted(df["sales"])
    ds.write_parquet(str(tmp_path), partition_cols=["city", "year"], min_rows_per_file=2, max_rows_per_file=3)
    assert _files(str(tmp_path)) == {f"city={c}/year={y}": 1 for c in ("SF", "NYC") for y in (2023, 2024)}
    # sort=True orders each block by its keys; rows of one key keep their input order
    two = md.from_items([{"k": k, "i": i} for i, k in enumerate([3, 1, 2, 1, 3, 2])])
    parts = [b.to_pylist() for b in two.repartition(1, keys=["k"], sort=True)._execute()]
    assert parts == [[{"k": 1, "i": 1}, {"k": 1, "i": 3}, {"k": 2, "i": 2}, {"k": 2, "i": 5},
                      {"k": 3, "i": 0}, {"k": 3, "i": 4}]]


def test_shuffle_strategy_is_rays_setting_kept_with_no_effect():
    """saving-data.rst sets DataContext.shuffle_strategy = ShuffleStrategy.HASH_SHUFFLE before a keyed
    repartition. Before, `from ray.data.context import ShuffleStrategy` failed (unsupported)."""
    from muster.data.context import DataContext, ShuffleStrategy

    assert ShuffleStrategy("hash_shuffle") is ShuffleStrategy.HASH_SHUFFLE == "hash_shuffle"  # Ray's values
    assert {s.value for s in ShuffleStrategy} >= {"sort_shuffle_pull_based", "sort_shuffle_push_based",
                                                  "hash_shuffle", "shuffle_v2", "gpu_shuffle"}
    ctx = DataContext()
    ctx.shuffle_strategy = ShuffleStrategy.HASH_SHUFFLE  # kept, changes nothing here
    assert ctx.shuffle_strategy is ShuffleStrategy.HASH_SHUFFLE
    assert md.range(6).repartition(2, keys=["id"]).count() == 6


def test_write_numpy_saves_a_column_as_npy_files_read_numpy_reads_back(tmp_path):
    """working-with-tensors.rst: ds.write_numpy("/tmp/simple", column="image"). Before, refused as
    unsupported."""
    import numpy as np

    images = np.arange(5 * 4 * 4 * 3, dtype=np.uint8).reshape(5, 4, 4, 3)
    ds = md.from_numpy(images).repartition(2)
    files = ds.write_numpy(str(tmp_path / "simple"), column="data", min_rows_per_file=1)
    assert len(files) == 2 and all(f.endswith(".npy") for f in files)
    back = np.concatenate([np.load(f) for f in sorted(files)])
    assert back.dtype == np.uint8 and back.shape == (5, 4, 4, 3)
    assert sorted(map(bytes, back)) == sorted(map(bytes, images))
    assert md.read_numpy(str(tmp_path / "simple")).count() == 5
    scalars = md.range(4).write_numpy(str(tmp_path / "ids"), column="id")
    assert [np.load(f).tolist() for f in sorted(scalars)] == [[0, 1], [2, 3]]  # a file per block: 2 of 2 rows
    import pytest

    with pytest.raises(ValueError, match="column='nope'.*id"):
        md.range(4).write_numpy(str(tmp_path / "bad"), column="nope")


def test_data_context_keeps_rays_key_value_configs():
    """shuffling-data.rst: ctx.set_config("debug_limit_shuffle_execution_to_num_blocks", 2) before a
    shuffle. Before, an AttributeError (no set_config)."""
    ctx = md.DataContext()
    assert ctx.get_config("debug_limit_shuffle_execution_to_num_blocks") is None
    assert ctx.get_config("debug_limit_shuffle_execution_to_num_blocks", 7) == 7
    ctx.set_config("debug_limit_shuffle_execution_to_num_blocks", 2)
    assert ctx.get_config("debug_limit_shuffle_execution_to_num_blocks") == 2
    assert md.DataContext().get_config("debug_limit_shuffle_execution_to_num_blocks") is None  # per context
    ctx.remove_config("debug_limit_shuffle_execution_to_num_blocks")
    ctx.remove_config("never_set")  # as Ray's: no error
    assert ctx.get_config("debug_limit_shuffle_execution_to_num_blocks") is None


def test_add_column_takes_a_one_column_frame_as_rays_pandas_assignment_does():
    """aggregations.rst: ds.add_column("group_key", lambda x: x % 3) on range(100), whose batch is a
    one-column DataFrame: Ray assigns it (batch.loc[:, col] = frame) and groups by it. Before, refused
    as a DataFrame."""
    from muster.data.aggregate import Count, Mean

    ds = md.range(100).add_column("group_key", lambda x: x % 3)
    assert ds.aggregate(Count()) == {"count()": 100}
    means = ds.groupby("group_key").aggregate(Mean(on="id")).take_all()
    assert means == [{"group_key": 0, "mean(id)": 49.5}, {"group_key": 1, "mean(id)": 49.0},
                     {"group_key": 2, "mean(id)": 50.0}]
    frame = md.from_items([{"a": 1.5}, {"a": 2.5}]).add_column("b", lambda df: df.rename(columns={"a": "z"}) * 2)
    assert frame.take_all() == [{"a": 1.5, "b": 3.0}, {"a": 2.5, "b": 5.0}]


def test_aggregate_fn_v2_subclass_with_block_accessor():
    """aggregations.rst: a custom Mean as an AggregateFnV2 subclass whose aggregate_block reads the block
    through BlockAccessor.for_block(block).count/sum. Before, neither name existed (ImportError)."""
    from muster.data.aggregate import AggregateFnV2
    from muster.data.block import AggType, Block, BlockAccessor, U  # noqa: F401 - Ray's names, importable

    class Mean(AggregateFnV2):
        def __init__(self, on=None, ignore_nulls=True, alias_name=None):
            super().__init__(alias_name or f"mean({on})", on=on, ignore_nulls=ignore_nulls, zero_factory=lambda: [0, 0])

        def aggregate_block(self, block):
            acc = BlockAccessor.for_block(block)
            count = acc.count(self._target_col_name, self._ignore_nulls)
            if not count:
                return None
            return [acc.sum(self._target_col_name, self._ignore_nulls), count]

        def combine(self, current_accumulator, new):
            return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

        def finalize(self, accumulator):
            return accumulator[0] / accumulator[1] if accumulator[1] else None

    ds = md.range(100, override_num_blocks=4).add_column("group_key", lambda df: df["id"] % 3)
    assert ds.aggregate(Mean(on="id")) == {"mean(id)": 49.5}
    assert ds.groupby("group_key").aggregate(Mean(on="id", alias_name="m")).take_all() == [
        {"group_key": 0, "m": 49.5}, {"group_key": 1, "m": 49.0}, {"group_key": 2, "m": 50.0}]
    agg = Mean(on="id")
    assert (agg.get_target_column(), agg.get_agg_name()) == ("id", "mean")
    nulls = md.from_items([{"v": 1.0}, {"v": None}, {"v": 3.0}])
    assert nulls.aggregate(Mean(on="v")) == {"mean(v)": 2.0}

    import pyarrow as pa

    acc = BlockAccessor.for_block(pa.table({"a": [1, None, 3], "b": ["x", "y", "z"]}))
    assert (acc.num_rows(), acc.count("a", True), acc.count("a", False), acc.count(None, True)) == (3, 2, 3, 3)
    assert (acc.sum("a", True), acc.sum("a", False), acc.min("a", True), acc.max("a", True)) == (4, None, 1, 3)
    assert acc.mean("a", True) == 2.0 and acc.column_names() == ["a", "b"]
    assert acc.to_pandas()["b"].tolist() == ["x", "y", "z"] and acc.to_arrow().num_rows == 3
    assert list(acc.to_numpy("b")) == ["x", "y", "z"] and list(acc.to_numpy()) == ["a", "b"]
    assert [r["b"] for r in acc.iter_rows(public_row_format=True)] == ["x", "y", "z"]
    assert acc.slice(1, 3).to_pylist() == [{"a": None, "b": "y"}, {"a": 3, "b": "z"}]
    assert BlockAccessor.for_block(acc.to_pandas()).num_rows() == 3  # a pandas block too


def test_rays_internal_modules_name_the_public_replacement():
    """Ray's doc snippets import ray.data._internal (DelegatingBlockBuilder, util.is_null). Before, a bare
    ModuleNotFoundError; now the error says what to use."""
    import pytest

    from muster.exceptions import UnsupportedRayImportError

    with pytest.raises(UnsupportedRayImportError, match=r"pyarrow\.Table\.from_pylist.*value is None"):
        from muster.data._internal.delegating_block_builder import DelegatingBlockBuilder  # noqa: F401
    with pytest.raises(ImportError, match="is_null"):
        from muster.data._internal.util import is_null  # noqa: F401


def _png_folder(root, n: int):
    import numpy as np
    from PIL import Image

    root.mkdir()
    images = [np.full((4, 4, 3), 40 * i, dtype=np.uint8) for i in range(n)]
    for i, image in enumerate(images):
        Image.fromarray(image).save(root / f"{i}.png")
    (root / "notes.txt").write_text("not an image")
    return images


def test_file_based_datasource_and_row_based_datasink_from_the_custom_datasource_guide(tmp_path):
    """custom-datasource-example.rst: an ImageDatasource(FileBasedDatasource) with _read_stream and an
    ImageDatasink(RowBasedFileDatasink) with write_row_to_file. Before, both bases were refused."""
    import io
    from typing import Iterator

    import numpy as np
    from PIL import Image

    from muster.data.datasource import FileBasedDatasource, RowBasedFileDatasink

    class ImageDatasource(FileBasedDatasource):
        def __init__(self, paths, *, mode, **options):
            super().__init__(paths, file_extensions=["png", "jpg"], **options)
            self.mode = mode

        def _read_stream(self, f, path: str) -> Iterator:
            image = Image.open(io.BytesIO(f.readall())).convert(self.mode)
            yield pd.DataFrame({"image": [np.array(image)]})

    class ImageDatasink(RowBasedFileDatasink):
        def __init__(self, path, column, file_format):
            super().__init__(path, file_format=file_format)
            self.column, self.file_format = column, file_format

        def write_row_to_file(self, row, file):
            buffer = io.BytesIO()
            Image.fromarray(row[self.column]).save(buffer, format=self.file_format)
            file.write(buffer.getvalue())

    images = _png_folder(tmp_path / "in", 3)
    source = ImageDatasource(str(tmp_path / "in"), mode="RGB")
    assert source.estimate_inmemory_data_size() > 0
    ds = md.read_datasource(source, override_num_blocks=2)
    assert [t.metadata.input_files for t in source.get_read_tasks(2)] == [
        (str(tmp_path / "in" / "0.png"),), (str(tmp_path / "in" / "1.png"), str(tmp_path / "in" / "2.png"))]
    assert sorted(os.path.basename(f) for f in ds.input_files()) == ["0.png", "1.png", "2.png"]  # not notes.txt
    got = sorted(ds.take_all(), key=lambda r: int(r["image"][0, 0, 0]))
    assert [r["image"].tolist() for r in got] == [i.tolist() for i in images]
    ds.write_datasink(ImageDatasink(str(tmp_path / "out"), column="image", file_format="png"))
    written = sorted(os.listdir(tmp_path / "out"))
    assert len(written) == 3 and all(w.endswith(".png") for w in written)
    back = sorted(md.read_images(str(tmp_path / "out")).take_all(), key=lambda r: int(r["image"][0, 0, 0]))
    assert [r["image"].tolist() for r in back] == [i.tolist() for i in images]
    gray = md.read_datasource(ImageDatasource(str(tmp_path / "in"), mode="L", include_paths=True))
    assert sorted((os.path.basename(r["path"]), r["image"].shape) for r in gray.take_all()) == [
        (f"{i}.png", (4, 4)) for i in range(3)]

    class Plain(FileBasedDatasource):
        pass

    import pytest

    with pytest.raises(Exception, match="_read_stream"):
        md.read_datasource(Plain(str(tmp_path / "in")), override_num_blocks=1).take_all()


def test_block_based_file_datasink_writes_one_file_per_write_task(tmp_path):
    """The guide's other file sink: BlockBasedFileDatasink.write_block_to_file(BlockAccessor, file), with
    min_rows_per_file gathering blocks, Ray's save modes and a FilenameProvider."""
    import pyarrow.csv as pcsv
    import pytest

    from muster.data.datasource import BlockBasedFileDatasink, FilenameProvider

    class CsvSink(BlockBasedFileDatasink):
        def __init__(self, path, **kwargs):
            super().__init__(path, file_format="csv", **kwargs)

        def write_block_to_file(self, block, file):
            pcsv.write_csv(block.to_arrow(), file)

    ds = md.range(10, override_num_blocks=5)
    ds.write_datasink(CsvSink(str(tmp_path / "csv"), min_rows_per_file=4))
    files = sorted(os.listdir(tmp_path / "csv"))
    assert len(files) == 3 and all(f.endswith(".csv") for f in files)  # 4 + 4 + 2 rows
    assert sorted(r["id"] for r in md.read_csv(str(tmp_path / "csv")).take_all()) == list(range(10))
    with pytest.raises(Exception, match="already exists"):
        ds.write_datasink(CsvSink(str(tmp_path / "csv"), mode="error"))
    ds.write_datasink(CsvSink(str(tmp_path / "csv"), mode="ignore"))
    assert len(os.listdir(tmp_path / "csv")) == 3

    class Named(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"part-{task_index}.{self.file_format}"

    ds.write_datasink(CsvSink(str(tmp_path / "csv"), mode="overwrite", filename_provider=Named(file_format="csv")))
    assert sorted(os.listdir(tmp_path / "csv")) == [f"part-{i}.csv" for i in range(5)]


def test_data_context_takes_rays_hash_shuffle_and_other_cluster_settings():
    """joining-data.rst sets DataContext.max_hash_shuffle_aggregators; shuffling-data.rst
    use_disk_based_hash_shuffle. Before, an AttributeError ("no setting"); a typo still is one."""
    import pytest

    ctx = md.DataContext()
    for name, value in [("max_hash_shuffle_aggregators", 4), ("default_hash_shuffle_parallelism", 8),
                        ("use_disk_based_hash_shuffle", True), ("streaming_read_buffer_size", 1 << 20),
                        ("min_parallelism", 2), ("s3_try_create_dir", False), ("max_map_retries", 0)]:
        setattr(ctx, name, value)  # kept, no effect here
        assert getattr(ctx, name) == value
    with pytest.raises(AttributeError, match="no setting 'max_hash_shuffle_agregators'"):
        ctx.max_hash_shuffle_agregators = 4


def test_zero_copy_batch_false_gives_writable_batches_and_the_error_names_it():
    """tensor.py / transforming docs mutate batches in place (batch["image"] += 1). Ray 2.60's batches are
    zero-copy read-only views unless map_batches(zero_copy_batch=False), which copies them. Before,
    zero_copy_batch=False was ignored: the batch stayed read-only and the error did not say why."""
    import pytest

    from muster.data import UserFunctionError

    def add_one(batch):
        batch["data"] += 1
        return batch

    ds = md.range_tensor(4, shape=(2,))
    assert [r["data"].tolist() for r in ds.map_batches(add_one, zero_copy_batch=False).take_all()] == [
        [1, 1], [2, 2], [3, 3], [4, 4]]
    assert [r["id"] for r in md.range(3).map_batches(lambda b: {"id": b["id"].__iadd__(1)},
                                                     zero_copy_batch=False).take_all()] == [1, 2, 3]
    with pytest.raises(UserFunctionError, match=r"read-only.*zero_copy_batch=False"):
        ds.map_batches(add_one).take_all()  # Ray's default: zero-copy, read-only


def test_rays_tensor_extensions_module_names_what_to_use():
    """tensor.py imports ray.data.extensions (TensorArray, ArrowTensorArray). Before, a bare
    ModuleNotFoundError."""
    import pytest

    from muster.exceptions import UnsupportedRayImportError

    with pytest.raises(UnsupportedRayImportError, match=r"list of same-shape ndarrays.*FixedShapeTensorType"):
        from muster.data.extensions import TensorArray  # noqa: F401


def test_write_images_writes_a_file_per_row_that_read_images_reads_back(tmp_path):
    """working-with-images.rst: ds.write_images("/tmp/simple", column="image", file_format="png").
    Before, refused as unsupported."""
    import pytest

    images = _png_folder(tmp_path / "in", 3)
    ds = md.read_images(str(tmp_path / "in"))
    assert ds.write_images(str(tmp_path / "out"), column="image", file_format="png") is None  # as Ray's
    names = sorted(os.listdir(tmp_path / "out"))
    assert len(names) == 3 and all(n.endswith(".png") for n in names)
    back = sorted(md.read_images(str(tmp_path / "out")).take_all(), key=lambda r: int(r["image"][0, 0, 0]))
    assert [r["image"].tolist() for r in back] == [i.tolist() for i in images]
    with pytest.raises(Exception, match="column 'img'"):
        ds.write_images(str(tmp_path / "bad"), column="img")


def test_an_unknown_url_scheme_names_the_path_and_rays_old_example_alias():
    """Older Ray docs read "example://iris.csv" (Ray's bundled samples, gone in Ray 2.60 too). Before, fsspec's
    bare "Protocol not known: example"."""
    import pytest

    from muster.data import DataSourceError

    with pytest.raises(DataSourceError,
                       match=r"read_csv: no filesystem for 'example://'.*s3://anonymous@ray-example-data"):
        md.read_csv("example://iris.csv")
    with pytest.raises(DataSourceError, match=r"read_parquet: no filesystem for 'nosuch://' \('nosuch://x'\)"):
        md.read_parquet("nosuch://x")


def test_tensor_columns_print_arrow_dtype_names_as_ray_and_materialized_repr_uses_them():
    """Tensor types print as Ray 2.60 prints them (its output, run here; its older docs show
    numpy.ndarray(shape=..., dtype=...)): ArrowTensorTypeV2(shape=(2, 2), dtype=double), dtype=float for
    float32, ArrowVariableShapedTensorType(ndim=2, dtype=float)."""
    import numpy as np

    ds = md.from_numpy(np.ones((3, 2, 2)))
    assert repr(ds.map(lambda r: r)).endswith("schema={data: ArrowTensorTypeV2(shape=(2, 2), dtype=double)}\n   )")
    assert str(md.from_numpy(np.ones((2, 3), np.float32)).schema()).splitlines()[-1] == (
        "data    ArrowTensorTypeV2(shape=(3,), dtype=float)")
    ragged = md.from_items([{"x": np.ones((1, 2), np.float32)}, {"x": np.ones((2, 2), np.float32)}])
    assert "x       ArrowVariableShapedTensorType(ndim=2, dtype=float)" in str(ragged.schema())


def test_sort_boundaries_cut_the_blocks_as_rays_range_partitions():
    """Dataset.sort's docstring: range(15).sort("id", boundaries=[5, 10]) gives blocks 0-4, 5-9, 10-14.
    Before, boundaries were ignored (one block). Expected values are Ray 2.60's, empty blocks included."""
    import muster

    def blocks(ds):
        return [list(df["id"]) for df in muster.get(ds.to_pandas_refs())]

    assert blocks(md.range(15).sort("id", boundaries=[5, 10])) == [list(range(5)), list(range(5, 10)),
                                                                     list(range(10, 15))]
    assert blocks(md.range(15).sort("id", descending=True, boundaries=[2.5, 7])) == [
        list(range(14, 6, -1)), [6, 5, 4, 3], [2, 1, 0]]
    assert blocks(md.range(15).sort("id", boundaries=[-3, 5])) == [[], list(range(5)), list(range(5, 15))]


def test_from_refs_build_a_dataset_from_object_refs():
    """read_api's from_pandas_refs / from_arrow_refs / from_numpy_refs examples: a ref or a list of refs, one
    block each. Before, all three were missing."""
    import numpy as np
    import pyarrow as pa
    import pytest

    import muster
    from muster.exceptions import InvalidTypeError

    df_ref = muster.put(pd.DataFrame({"a": [1, 2]}))
    ds = md.from_pandas_refs([df_ref, df_ref])
    assert ds.take_all() == [{"a": 1}, {"a": 2}] * 2 and ds.num_blocks() == 2
    assert md.from_arrow_refs(muster.put(pa.table({"x": ["s"]}))).take_all() == [{"x": "s"}]
    assert [r["data"].tolist() for r in md.from_numpy_refs(muster.put(np.zeros((2, 3)))).take_all()] == [[0.0] * 3] * 2
    with pytest.raises(InvalidTypeError, match="use from_pandas"):
        md.from_pandas_refs(pd.DataFrame({"a": [1]}))


def test_with_columns_adds_several_expression_columns_in_one_projection():
    """Dataset.with_columns' docstring: range(100).with_columns({"id_2": col("id") * 2, "id_3": col("id") * 3})
    .show(2) prints {'id': 0, 'id_2': 0, 'id_3': 0}, {'id': 1, 'id_2': 2, 'id_3': 3}. Before, missing."""
    import pytest

    from muster.data.expressions import col
    from muster.exceptions import InvalidTypeError

    ds = md.range(100).with_columns({"id_2": col("id") * 2, "id_3": col("id") * 3})
    assert ds.take(2) == [{"id": 0, "id_2": 0, "id_3": 0}, {"id": 1, "id_2": 2, "id_3": 3}]
    # one projection over the input's columns: "id" is replaced, and id_2 still reads the old one
    assert md.range(3).with_columns({"id": col("id") + 10}, {"id_2": col("id") * 2}).take(1) == [{"id": 10, "id_2": 0}]
    with pytest.raises(InvalidTypeError, match="not column name -> expression"):
        md.range(3).with_columns({"x": lambda b: b})


def test_take_batch_of_an_empty_dataset_is_an_error_as_rays():
    """Dataset.take_batch's docs: "Raises: ValueError – if the dataset is empty". Before, an empty batch."""
    import pytest

    with pytest.raises(ValueError, match="dataset is empty"):
        md.range(10).filter(lambda r: False).take_batch(3)
    assert md.range(10).filter(lambda r: False).take(3) == []


def test_batch_format_none_gives_the_blocks_own_format_a_pyarrow_table():
    """map_batches/iter_batches/take_batch/map_groups docs: ``batch_format=None`` selects the underlying block
    format; Ray 2.60 gives pyarrow Tables there. Before, every one refused None; add_column still does (as Ray)."""
    import pyarrow as pa
    import pytest

    from muster.exceptions import InvalidArgumentError

    ds = md.from_items([{"a": i, "b": str(i)} for i in range(4)])
    seen = ds.map_batches(lambda t: {"kind": [type(t).__name__] * t.num_rows}, batch_format=None)
    assert {r["kind"] for r in seen.take_all()} == {"Table"}
    assert isinstance(next(iter(ds.iter_batches(batch_size=2, batch_format=None))), pa.Table)
    assert ds.take_batch(2, batch_format=None).to_pylist() == [{"a": 0, "b": "0"}, {"a": 1, "b": "1"}]
    groups = ds.groupby("a").map_groups(lambda t: {"n": [t.num_rows]}, batch_format=None)
    assert groups.sum("n") == 4
    with pytest.raises(InvalidArgumentError, match=r"add_column\(batch_format=None\)"):
        ds.add_column("c", lambda b: b["a"], batch_format=None)


def test_blocks_whose_types_widen_to_one_combine_as_rays_and_others_fail_naming_the_field():
    """A pandas batch function's pass-through string column comes back large_string (pandas 3), so unioning
    the output with its input failed in take_all with pyarrow's raw ArrowTypeError; Ray 2.60 combines
    string with large_string (and int32 with int64, int64 with double) and its union takes all 8 rows."""
    import pyarrow as pa
    import pytest

    from muster.data import DataTypeError

    ds = md.from_items([{"a": i, "b": str(i)} for i in range(4)])
    mapped = ds.map_batches(lambda df: df, batch_format="pandas")
    assert sorted(r["a"] for r in mapped.union(ds).take_all()) == [0, 0, 1, 1, 2, 2, 3, 3]
    ints = md.from_arrow(pa.table({"x": pa.array([1, 2], pa.int32())}))
    wide = ints.union(md.from_arrow(pa.table({"x": [1.5]}))).repartition(1)
    assert wide.schema().types == [pa.float64()] and wide.sum("x") == 4.5
    strings = ints.union(md.from_arrow(pa.table({"x": ["s"]})))
    with pytest.raises(DataTypeError, match="Field x has incompatible types: int32 vs string.*cast the column"):
        strings.repartition(1).take_all()


def test_a_batch_column_given_as_one_value_is_an_error_naming_the_column():
    """``return {"s": 5}`` from map_batches failed with Python's bare "'int' object is not iterable" (and a
    string became one row per character); Ray 2.60 refuses it naming the key and its type."""
    import pytest

    from muster.data import DataTypeError

    ds = md.range(4)
    with pytest.raises(DataTypeError, match="column 's' is a single int .5., not one value per row"):
        ds.map_batches(lambda b: {"id": b["id"], "s": 5}).take_all()
    with pytest.raises(DataTypeError, match="column 's' is a single str"):
        ds.map_batches(lambda b: {"s": "abcd"}).take_all()
    assert ds.map_batches(lambda b: {"s": [str(v) for v in b["id"]]}).take(1) == [{"s": "0"}]

"""Ray Data names Ray itself removed fail naming what replaced them, not with a bare AttributeError."""

from __future__ import annotations

import pytest

import muster.data as md
from muster.exceptions import InvalidTypeError, UnsupportedRayAPIError, UnsupportedRayImportError


@pytest.mark.parametrize("name, fix", [
    ("fully_executed", r"materialize\(\)"),
    ("is_fully_executed", "MaterializedDataset"),
    ("lazy", "every Dataset is lazy"),
    ("default_batch_format", "batch_format="),
    ("dataset_format", r"schema\(\)"),
    ("repeat", r"for epoch in range\(n\)"),
    ("window", r"iter_batches\(...\)"),
    ("to_torch", r"iter_torch_batches\(batch_size=...\)"),
])
def test_removed_dataset_methods_name_their_replacement(name, fix):
    ds = md.range(3)
    with pytest.raises(UnsupportedRayAPIError, match=rf"ray\.data\.Dataset\.{name}\) was removed from Ray; "
                                                     rf"instead, .*{fix}"):
        getattr(ds, name)
    assert not hasattr(ds.materialize(), name)  # an AttributeError still, for hasattr
    with pytest.raises(AttributeError, match="has no attribute 'fully_executd'"):  # a typo stays a plain one
        ds.fully_executd


def test_removed_module_names_and_iterator_arguments_name_their_replacement():
    with pytest.raises(UnsupportedRayAPIError, match=r"ray\.data\.range_table\) was removed .*range\(n\)"):
        md.range_table(3)
    with pytest.raises(UnsupportedRayImportError, match=r"DatasetPipeline .*was removed .*iter_batches"):
        from muster.data import DatasetPipeline  # noqa: F401
    with pytest.raises(UnsupportedRayImportError, match=r"BatchMapper .*was removed .*map_batches"):
        from muster.data.preprocessors import BatchMapper  # noqa: F401
    ds = md.range(3)
    for method in (ds.iter_batches, ds.iter_torch_batches, ds.iterator().iter_batches):
        with pytest.raises(InvalidTypeError, match=r"\(prefetch_blocks=...\): Ray removed 'prefetch_blocks'; "
                                                   r"pass prefetch_batches= instead"):
            method(prefetch_blocks=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        ds.iter_batches(batchsize=2)
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=2, prefetch_batches=0)] == [2, 1]


@pytest.mark.parametrize("name, fix", [
    ("to_random_access_dataset", r"set_index\(key\)"),
    ("write_lance", r"write_parquet\(\)"),
    ("write_kafka", "Kafka producer"),
    ("iter_jax_batches", "jax.numpy.asarray"),
    ("context", r"DataContext.get_current\(\)"),
    ("serialize_lineage", r"cloudpickle.dumps\(ds\)"),
])
def test_rays_other_dataset_methods_name_the_muster_way(name, fix):
    """Ray 2.60 Dataset methods muster lacks fail naming what to use (before: a bare AttributeError)."""
    with pytest.raises(UnsupportedRayAPIError, match=rf"ray\.data\.Dataset\.{name}\) is not supported by muster; "
                                                     rf"nearest equivalent: .*{fix}"):
        getattr(md.range(3), name)

"""``Checkpoint`` on its own, and how a run folder tells committed checkpoints from leftovers."""

from __future__ import annotations

import json
import os

import pytest
import torch

from muster.train import Checkpoint, Result
from muster.train.storage import MANIFEST, Storage


def _folder(tmp_path, files: dict[str, bytes]) -> str:
    root = tmp_path / "src"
    for rel, body in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    return str(root)


def test_from_directory_path_and_as_directory(tmp_path):
    src = _folder(tmp_path, {"model.pt": b"weights", "sub/opt.pt": b"state"})
    ckpt = Checkpoint.from_directory(src)
    assert ckpt.path == os.path.abspath(src)
    assert os.fspath(ckpt) == ckpt.path
    assert ckpt.is_local
    with ckpt.as_directory() as folder:
        assert open(os.path.join(folder, "model.pt"), "rb").read() == b"weights"
        assert open(os.path.join(folder, "sub", "opt.pt"), "rb").read() == b"state"
    assert os.path.isdir(src)  # a local checkpoint's folder is not removed by as_directory


def test_from_directory_relative_path_is_made_absolute(tmp_path, monkeypatch):
    _folder(tmp_path, {"a": b"1"})
    monkeypatch.chdir(tmp_path)
    assert Checkpoint.from_directory("src").path == str(tmp_path / "src")


def test_from_directory_missing_folder_says_so(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(ValueError, match="no such folder") as info:
        Checkpoint.from_directory(missing)
    assert missing in str(info.value)


def test_to_directory_copies_into_given_or_new_folder(tmp_path):
    src = _folder(tmp_path, {"model.pt": b"weights", "sub/opt.pt": b"state"})
    ckpt = Checkpoint.from_directory(src)
    dest = ckpt.to_directory(str(tmp_path / "dest"))
    assert dest == str(tmp_path / "dest")
    assert (tmp_path / "dest" / "sub" / "opt.pt").read_bytes() == b"state"
    fresh = ckpt.to_directory()
    try:
        assert fresh != src
        assert open(os.path.join(fresh, "model.pt"), "rb").read() == b"weights"
    finally:
        import shutil

        shutil.rmtree(fresh)


def test_metadata_get_set_update(tmp_path):
    ckpt = Checkpoint.from_directory(_folder(tmp_path, {"a": b"1"}))
    assert ckpt.get_metadata() == {}
    ckpt.set_metadata({"epoch": 3, "tag": "x"})
    assert ckpt.get_metadata() == {"epoch": 3, "tag": "x"}
    ckpt.update_metadata({"epoch": 4, "lr": 0.1})
    assert ckpt.get_metadata() == {"epoch": 4, "tag": "x", "lr": 0.1}
    # Metadata is stored with the files, so a new handle on the folder sees it.
    assert Checkpoint(ckpt.path).get_metadata()["lr"] == 0.1
    ckpt.set_metadata({"only": 1})
    assert ckpt.get_metadata() == {"only": 1}


def test_metadata_must_be_json(tmp_path):
    ckpt = Checkpoint.from_directory(_folder(tmp_path, {"a": b"1"}))
    with pytest.raises(TypeError, match="JSON"):
        ckpt.set_metadata({"bad": object()})
    assert ckpt.get_metadata() == {}


def test_from_dict_to_dict_round_trip_with_tensors():
    model = torch.nn.Linear(3, 2)
    data = {"model": model.state_dict(), "epoch": 7, "nested": {"t": torch.arange(4)}}
    ckpt = Checkpoint.from_dict(data)
    try:
        back = ckpt.to_dict()
        assert back["epoch"] == 7
        assert torch.equal(back["nested"]["t"], torch.arange(4))
        for key, value in model.state_dict().items():
            assert torch.equal(back["model"][key], value)
        # A plain folder copy of it still loads as a dict.
        copy = Checkpoint.from_directory(ckpt.to_directory())
        assert copy.to_dict()["epoch"] == 7
    finally:
        import shutil

        shutil.rmtree(ckpt.path, ignore_errors=True)


def test_from_dict_rejects_non_dict():
    with pytest.raises(TypeError, match="dict"):
        Checkpoint.from_dict([1, 2])  # type: ignore[arg-type]


def test_to_dict_on_plain_folder_explains(tmp_path):
    ckpt = Checkpoint.from_directory(_folder(tmp_path, {"model.pt": b"x"}))
    with pytest.raises(ValueError, match="from_dict"):
        ckpt.to_dict()


def test_equality_and_repr(tmp_path):
    src = _folder(tmp_path, {"a": b"1"})
    a, b = Checkpoint.from_directory(src), Checkpoint(src)
    assert a == b and hash(a) == hash(b)
    assert a != Checkpoint(str(tmp_path))
    assert src in repr(a)


# -- the run folder: committed vs leftover ---------------------------------------------
def test_commit_publishes_staged_files_with_manifest(tmp_path):
    storage = Storage(str(tmp_path), "run")
    src = _folder(tmp_path, {"shard_0.pt": b"0", "deep/x.bin": b"xx"})
    files = storage.upload_dir(src, storage.staging_dir(3))
    assert {rel: meta["size"] for rel, meta in files.items()} == {"shard_0.pt": 1, "deep/x.bin": 2}
    assert storage.committed_rounds() == []  # staged is not committed
    final = storage.commit(3, {"round": 3, "files": files})
    assert final == storage.checkpoint_dir(3) and final.endswith("checkpoint_000003")
    assert sorted(os.listdir(final)) == sorted([MANIFEST, "shard_0.pt", "deep"])
    assert not os.path.exists(storage.staging_dir(3))
    assert json.load(open(os.path.join(final, MANIFEST)))["round"] == 3
    assert storage.committed_rounds() == [3]


def test_folders_without_manifest_are_not_checkpoints(tmp_path):
    storage = Storage(str(tmp_path), "run")
    src = _folder(tmp_path, {"w.pt": b"w"})
    storage.upload_dir(src, storage.staging_dir(1))
    storage.commit(1, {"round": 1, "metrics": {"loss": 1.0}})
    # A half-written checkpoint folder and a staging leftover from a dead attempt.
    storage.upload_dir(src, storage.checkpoint_dir(2))
    storage.upload_dir(src, storage.staging_dir(3))
    os.makedirs(os.path.join(storage.run_dir, "checkpoint_notanumber"))
    assert storage.committed_rounds() == [1]
    result = Result.from_path(storage.run_dir)
    assert [c.path for c, _ in result.best_checkpoints] == [storage.checkpoint_dir(1)]
    assert result.checkpoint.path == storage.checkpoint_dir(1)
    assert result.best_checkpoints[0][1] == {"loss": 1.0}


def test_result_from_path_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="no such run folder"):
        Result.from_path(str(tmp_path / "nothing"))


def test_torch_checkpoint_as_in_rays_examples():
    """Ray's TorchCheckpoint (from_state_dict / from_model / get_model); it was missing."""
    import torch

    from muster.train.torch import TorchCheckpoint

    model = torch.nn.Linear(3, 1)
    saved = TorchCheckpoint.from_state_dict(model.state_dict())
    loaded = saved.get_model(torch.nn.Linear(3, 1))
    assert torch.equal(loaded.weight, model.weight) and torch.equal(loaded.bias, model.bias)
    with pytest.raises(ValueError, match="holds a state dict; pass the model"):
        saved.get_model()
    whole = TorchCheckpoint.from_checkpoint(Checkpoint(TorchCheckpoint.from_model(model).path))
    assert isinstance(whole.get_model(), torch.nn.Linear)


def test_torch_checkpoint_keeps_a_fitted_preprocessor():
    """TorchCheckpoint.from_model(model, preprocessor=p) / get_preprocessor(), as in Ray (it was refused)."""
    import muster.data as md
    from muster.data.preprocessors import StandardScaler
    from muster.train.torch import TorchCheckpoint

    scaler = StandardScaler(["x"]).fit(md.from_items([{"x": 1.0}, {"x": 3.0}]))
    saved = TorchCheckpoint.from_model(torch.nn.Linear(1, 1), preprocessor=scaler)
    reopened = TorchCheckpoint.from_checkpoint(Checkpoint(saved.path))
    assert reopened.get_preprocessor().stats_ == {"mean(x)": 2.0, "std(x)": 1.0}
    assert isinstance(reopened.get_model(), torch.nn.Linear)
    assert TorchCheckpoint.from_state_dict(torch.nn.Linear(1, 1).state_dict()).get_preprocessor() is None

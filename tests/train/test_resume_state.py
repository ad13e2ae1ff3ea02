"""A rank's resume state: a plain pickle (cheap on every report), and earlier torch.save states still load."""

from __future__ import annotations

import io
import pickle
import random

import numpy as np
import torch

from muster.train._internal import resume


def _draw() -> tuple:
    return float(torch.rand(1).item()), float(np.random.random()), random.random()


def test_state_is_a_plain_pickle_that_restores_every_rng():
    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    data = resume.ResumeBook().capture()
    assert not data.startswith(b"PK")  # not torch.save's zip archive
    assert isinstance(pickle.loads(data)["rng"]["torch"], bytes)
    expected = _draw()
    _draw()
    resume.set_rng(resume.load(data, own_rng=True)["rng"])
    assert _draw() == expected
    assert "rng" not in resume.load(data, own_rng=False)


def test_a_state_saved_with_torch_save_by_earlier_versions_still_loads():
    torch.manual_seed(7)
    buf = io.BytesIO()
    torch.save({"loaders": [], "rng": {"python": random.getstate(), "torch": torch.get_rng_state()}}, buf)
    expected = float(torch.rand(1).item())
    state = resume.load(buf.getvalue(), own_rng=True)
    resume.set_rng(state["rng"])
    assert float(torch.rand(1).item()) == expected

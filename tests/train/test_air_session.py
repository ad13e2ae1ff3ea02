"""``ray.air.session`` (older Ray docs: session.report, session.get_dataset_shard, ...) fails naming each
function's ``muster.train`` replacement."""

from __future__ import annotations

import pytest

from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError

_NAMED = r"muster\.train\.report / get_checkpoint / get_context / get_dataset_shard"


def test_air_session_names_every_replacement_get_dataset_shard_too():
    import muster.air

    with pytest.raises(UnsupportedRayImportError, match=_NAMED):
        from muster.air import session  # noqa: F401  (Ray's working-with-pytorch doc's form)
    with pytest.raises(UnsupportedRayImportError, match=r"session\.report / .*get_dataset_shard\(name\)"):
        import muster.air.session  # noqa: F401
    with pytest.raises(UnsupportedRayAPIError, match=_NAMED):
        muster.air.session
    import muster.train

    assert callable(muster.train.get_dataset_shard)  # the name the message gives exists

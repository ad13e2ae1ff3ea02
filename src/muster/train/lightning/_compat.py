"""The one place muster.train.lightning imports Lightning, with the install hint when it is missing."""

from __future__ import annotations

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "muster.train.lightning needs Lightning (the `lightning` package, imported as lightning.pytorch): "
        'pip install "muster[lightning]"'
    ) from exc

__all__ = ["pl"]

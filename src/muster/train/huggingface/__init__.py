"""muster.train.huggingface: Hugging Face integrations (``ray.train.huggingface`` -> here).

See ``muster.train.huggingface.transformers``.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.train.huggingface", name)

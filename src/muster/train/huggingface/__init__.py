"""muster.train.huggingface: Hugging Face integrations (``ray.train.huggingface`` -> here).

See ``muster.train.huggingface.transformers``.
"""

"""Ray's ``ray.train.examples.pytorch``: ``torch_linear_example`` (see ``muster.train.examples``)."""

"""Ray's ``ray.train.examples``: the training functions Ray's docs import from it.

Only the ones that need no download are here: ``muster.train.examples.pytorch.torch_linear_example``
(a linear model on generated data). Ray's ``torch_fashion_mnist_example`` and ``torch_quick_start``
download FashionMNIST, and ``torch_regression_example`` reads a CSV from S3; they are not provided.
"""

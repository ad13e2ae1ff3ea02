"""Ray's ``ray.tune.examples``: the trainables Ray's docs import from it.

Only what needs no download and no other library is here: ``muster.tune.examples.pbt_function``
(Ray's toy learning-rate problem for PBT and PB2, which the PB2 docstring and ``pb2_example`` import).
Ray's MNIST/CIFAR examples download their data, and the Keras/XGBoost/LightGBM ones need those
libraries; they are not provided.
"""

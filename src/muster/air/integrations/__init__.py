"""Experiment-tracking callbacks under Ray's import paths (``ray.air.integrations.mlflow``, ``.wandb``)."""

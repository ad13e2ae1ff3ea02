#!/usr/bin/env bash
# One command from a fresh clone: set up, then run the whole test suite.
EXTRAS="[test,tune,lightning,transformers,dashboard,tensorboard,mlflow,ray,data,serve,llm]" source "$(dirname "$0")/_setup.sh"
# Two test processes (pytest-xdist; tests/conftest.py keeps a module's tests in one process, and all of
# tests/cluster too): ~20 instead of ~30 minutes here (docs/benchmarks.md, "The test suite's time").
# A later `-n` wins: `bash scripts/test.sh -n 0` runs them in one process.
exec python -m pytest -n 2 "$@"

#!/usr/bin/env bash
# One command from a fresh clone: set up, then run the whole test suite.
EXTRAS="[test,tune,lightning,transformers,dashboard,tensorboard,mlflow,ray,serve,llm]" source "$(dirname "$0")/_setup.sh"
exec python -m pytest "$@"

#!/usr/bin/env bash
# One command from a fresh clone: set up, then run the whole test suite.
EXTRAS="[test,tune,lightning,transformers,dashboard,tensorboard,mlflow,ray,data,serve,llm]" source "$(dirname "$0")/_setup.sh"
# Two test processes (pytest-xdist): most tests wait on processes, sockets and clocks, so one process left a core
# idle for much of the run. A module's tests stay in one process, and all of tests/cluster too (one Ray cluster:
# tests/conftest.py schedules them so). `bash scripts/test.sh -n 0 ...` runs in this process alone.
exec python -m pytest -n 2 "$@"

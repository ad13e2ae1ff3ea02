#!/usr/bin/env bash
# One command from a fresh clone: set up, then run the whole test suite.
EXTRAS="[test,tune,lightning,transformers,dashboard,tensorboard,mlflow,ray,data,serve,llm]" source "$(dirname "$0")/_setup.sh"
# One test process. `bash scripts/test.sh -n 2` runs the tests in two (pytest-xdist; a module's tests stay in one
# process, and all of tests/cluster too: tests/conftest.py schedules them so): ~20 instead of ~30 minutes here,
# but with the cores shared, timing-sensitive tests fail more often (docs/benchmarks.md, "The test suite's time").
exec python -m pytest "$@"

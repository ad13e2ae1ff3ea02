#!/usr/bin/env bash
# One command from a fresh clone: set up, then train on 2 workers on the embedded engine.
EXTRAS="" source "$(dirname "$0")/_setup.sh"
exec python examples/quickstart.py "$@"

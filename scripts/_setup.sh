# Sourced by demo.sh and test.sh: make .venv (once) and install muster into it.
# torch comes first, pinned, so pip takes the local CPU wheel instead of
# downloading CUDA builds; then muster and the extras asked for in $EXTRAS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --disable-pip-version-check "torch==2.13.0"
python -m pip install -q --disable-pip-version-check -e ".${EXTRAS:-}"
# An editable install leaves muster's sources uncompiled, and with PYTHONDONTWRITEBYTECODE set (as in
# many containers) every new interpreter -- each worker runtime, driver and CLI call -- compiled them
# again (~0.5 s each). Writing the bytecode once here lets them all read it.
python -m compileall -q -j 0 src >/dev/null

"""``python -m muster ...``: the ``muster`` command (``muster status``, ``muster serve run``, ...) without the
console script on ``PATH``."""

import sys

from muster.cli import main

if __name__ == "__main__":
    sys.exit(main())

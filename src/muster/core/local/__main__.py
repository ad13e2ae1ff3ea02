"""``python -m muster.core.local [--worker]``: the zygote, or one worker, in a fresh interpreter.

Started through the package rather than as ``-m muster.core.local.zygote``: the package imports
the zygote module, so running that module as ``__main__`` as well would execute it a second time
(two copies of its globals, and runpy's RuntimeWarning on the user's terminal at every start).
"""

import sys

from muster.core.local import zygote

if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        zygote.worker_main()
    else:
        zygote.main()

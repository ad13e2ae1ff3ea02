"""Run a script as its own process, killed (SIGKILL) or stopped (SIGSTOP) in the middle of a whole-file write.

usage: _killed_mid_write.py KILL|STOP FILE_NAME NTH SCRIPT [ARGS...]
       _killed_mid_write.py KILL|STOP FILE_NAME NTH write RUN_FOLDER TEXT
An audit hook watches the renames that publish whole-file writes: at the NTH one onto a file named FILE_NAME
the temporary file is written and synced but not yet renamed into place, and the process gets the signal, as a
crash (or a writer descheduled for long) would leave it. Then SCRIPT runs as ``__main__`` with ARGS; or
(``write``) the process writes TEXT into FILE_NAME of the run folder RUN_FOLDER as muster writes its files.
"""

import os
import runpy
import signal
import sys


def _hook(sig: int, file_name: str, nth: int):
    seen = []

    def hook(event, args):
        if event == "os.rename" and os.path.basename(os.fsdecode(args[1])) == file_name:
            seen.append(args[0])
            if len(seen) == nth:
                os.kill(os.getpid(), sig)

    return hook


if __name__ == "__main__":
    how, file_name, nth, script = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sys.addaudithook(_hook(signal.SIGKILL if how == "KILL" else signal.SIGSTOP, file_name, nth))
    if script == "write":
        from muster.train.storage import Storage

        st = Storage.at(sys.argv[5])
        st.write_text(st.join(st.run_dir, file_name), sys.argv[6])
    else:
        sys.argv = [script, *sys.argv[5:]]
        runpy.run_path(script, run_name="__main__")

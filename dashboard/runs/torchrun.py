"""torchrun as a worker starts it, ending with the worker::

    python -m dashboard.runs.torchrun [torchrun's arguments]

A worker killed outright (SIGKILL, the out-of-memory killer) cannot stop the torchrun
it started, and torchrun, re-parented, would go on training until the reaper gave the
run to a new attempt and rank 0's sink saw its lease gone; ranks stuck where no step
comes would stay for good. So torchrun ends with its parent, as the ranks end with
torchrun (:func:`~dashboard.runs.rank.exit_with_parent`): the kernel kills it, and its
ranks follow it. The parent that counts is the worker's thread that started it, which
waits for it to exit (the Celery pool process's, the embedded executor's run thread).
"""

from __future__ import annotations

import sys

from torch.distributed.run import main

from dashboard.runs.rank import exit_with_parent

if __name__ == "__main__":
    exit_with_parent()
    main(sys.argv[1:])

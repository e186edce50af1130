"""Entry point of the math-verify worker process: `python -m legival_core.grading._worker_main FD`."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from legival_core.grading.worker import _serve

if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))

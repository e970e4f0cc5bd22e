"""Helper modules of the entry points in ``tools/``: ``bench.py``'s sections and measurements, and the processes
the soaks and the deployment tests start.  None of them is run by hand (``tools/README.rst`` lists what is)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:   # the checkout's own package, whatever directory the tool is started from
    sys.path.insert(0, ROOT)

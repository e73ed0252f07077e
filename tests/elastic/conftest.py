"""The elastic tests' pytest set-up: tests/ on the path, for timing.py, and
every failure says the load and the timings it ran with."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timing import pytest_runtest_makereport  # noqa: E402,F401

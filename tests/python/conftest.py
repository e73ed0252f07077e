"""Fixtures of the Python client's tests: a 4-host ring of real ringd daemons
on 127.0.0.1 (free ports, generated config) and one process per rank.

ctest sets RINGD_LIBRARY and RINGD_BIN to the build's libringd and ringd; run
by hand, the package finds them in the checkout's build/ (see ringd._lib).
"""

import contextlib
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
# The rank processes (multiprocessing, spawn) inherit these through sys.path.

from ringd.launch import LocalRing  # noqa: E402
from ringpool import RankPool  # noqa: E402
# Every failure says the load and the timings it ran with.
from timing import pytest_runtest_makereport  # noqa: E402,F401



HOSTS = 4
# Short enough that a test that went wrong fails fast, long enough for a
# loaded 2-core machine running four daemons and four clients.
RING_CONFIG = "collective_timeout: 20s\n"


def import_torch():
    """torch, for the PyTorch tests; skips the calling module without it, and
    in sanitized builds (RINGD_SKIP_TORCH_TESTS, see CMakeLists.txt)."""
    if os.environ.get("RINGD_SKIP_TORCH_TESTS"):
        pytest.skip("the PyTorch tests run in the normal build only", allow_module_level=True)
    return pytest.importorskip("torch")


# A port that free_ports() found free may be taken before the daemon binds
# it (by another ring's outgoing connection, say): start again, new ports.
START_TRIES = 3


def start_ring(hosts, local_clients, config):
    for attempt in range(START_TRIES):
        r = LocalRing(hosts, local_clients, extra_yaml=config)
        try:
            r.start()
            return r
        except RuntimeError as e:
            if "address already in use" not in str(e) or attempt + 1 == START_TRIES:
                raise
            shutil.rmtree(r.dir, ignore_errors=True)


@contextlib.contextmanager
def running_ring(hosts=HOSTS, local_clients=1, config=RING_CONFIG):
    """A LocalRing, started; stopped at the end, failing the test if a
    daemon did not exit cleanly."""
    r = start_ring(hosts, local_clients, config)
    try:
        yield r
    finally:
        codes = r.stop()
        # A daemon that crashed (or, in a sanitized build, reported an error)
        # fails the run; its log stays in r.dir.
        failed = [i for i, code in enumerate(codes) if code != 0]
        assert not failed, f"ringd exited with status {codes}:\n" + "\n".join(
            r.log_tail(i) for i in failed
        )


@pytest.fixture(scope="session")
def ring():
    with running_ring() as r:
        yield r


class _PoolHolder:
    def __init__(self, ring):
        self.ring = ring
        self.pool = None

    def get(self):
        if self.pool is None or self.pool.broken:
            if self.pool is not None:
                self.pool.close()
            self.pool = RankPool(self.ring)
        return self.pool


@contextlib.contextmanager
def pool_holder(ring):
    """Gives out ring's rank processes (holder.get()), made again after one
    was killed; closes them at the end."""
    holder = _PoolHolder(ring)
    try:
        yield holder
    finally:
        if holder.pool is not None:
            holder.pool.close()


@pytest.fixture(scope="session")
def _pool_holder(ring):
    with pool_holder(ring) as holder:
        yield holder


@pytest.fixture
def pool(_pool_holder):
    """The session's rank processes (made again after one was killed)."""
    return _pool_holder.get()


# A ring of a test module's own, where its tests may kill ranks without
# disturbing the other modules', with a short collective_timeout: a rank that
# never comes fails the others' collective fast.
OWN_RING_CONFIG = "collective_timeout: 5s\n"


@pytest.fixture(scope="module")
def own_ring():
    with running_ring(config=OWN_RING_CONFIG) as r:
        yield r


@pytest.fixture(scope="module")
def own_pools(own_ring):
    """own_ring's rank processes: own_pools.get()."""
    with pool_holder(own_ring) as holder:
        yield holder

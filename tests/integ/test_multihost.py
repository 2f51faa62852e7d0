"""Beyond one machine, on one machine: hosts that are network namespaces AND time
namespaces whose CLOCK_MONOTONIC differs from the harness's by a known offset, so that a
wrong clock alignment shows as a wrong figure (docs/multihost.md)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.procs.clock import Offset, Responder
from bench.procs.store import bound_store

pytestmark = pytest.mark.integ

SHIFT_S = 1000


def _need_time_namespaces() -> None:
    if os.geteuid() != 0:
        pytest.skip("time namespaces need root (unshare --time)")
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")


PINGER = """
import datetime, json, sys
import torch.distributed as dist
from bench.procs.clock import StorePinger
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, False, timeout=datetime.timedelta(seconds=20))
pinger = StorePinger(store, "clock/h9")
est = pinger.measure()
pinger.bye()
print(json.dumps(est.as_dict()))
"""


@pytest.mark.timeout(60)
def test_offset_of_a_time_namespace_is_found_within_its_error() -> None:
    """The true offset is exactly -1000 s (the namespace's monotonic clock runs 1000 s
    ahead); the estimate must lie within its own stated uncertainty of it."""
    _need_time_namespaces()
    server = bound_store("127.0.0.1", timeout_s=30)
    responder = Responder(lambda: dist_client(server.port), "clock/h9").start()
    try:
        out = subprocess.run(
            ["unshare", "--time", "--monotonic", str(SHIFT_S), sys.executable, "-c", PINGER, str(server.port)],
            capture_output=True,
            text=True,
            timeout=45,
            check=True,
        )
    finally:
        responder.stop()
    est = Offset.from_dict(json.loads(out.stdout.strip().splitlines()[-1]))
    truth = -SHIFT_S * 10**9
    print(f"estimated {est.offset_ns} ns, truth {truth} ns, error {est.offset_ns - truth} ns, stated +-{est.err_ns} ns")
    assert abs(est.offset_ns - truth) <= est.err_ns, (est, truth)
    assert est.err_ns < 50_000_000, "a loopback round trip should not take 100 ms"


def dist_client(port: int) -> object:
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=20))

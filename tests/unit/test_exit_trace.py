"""``tools/exit_trace.py`` reads the kernel's trace as this machine writes it.

The lines are from a real trace of a fail-stop trial (docs/calibration.md, "Launch
modes"): a rank's thread group closes a socket before it exits (not counted: the
figure is the exit's), calls ``exit_group``, and one of its threads, not its main one,
sends the first FIN 25.2 ms later. Another process's events do not count for it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("exit_trace", ROOT / "tools" / "exit_trace.py")
assert _spec and _spec.loader
exit_trace = importlib.util.module_from_spec(_spec)
sys.modules["exit_trace"] = exit_trace
_spec.loader.exec_module(exit_trace)

TCP = "family=AF_INET protocol=IPPROTO_TCP sport=34668 dport=33537"
FIN = f"inet_sock_set_state: {TCP} oldstate=TCP_ESTABLISHED newstate=TCP_FIN_WAIT1"
ACK = f"inet_sock_set_state: {TCP} oldstate=TCP_CLOSE_WAIT newstate=TCP_LAST_ACK"
DRAIN = "mm_page_pcpu_drain: page=00000000a24c044a pfn=0x1d9593 order=0 migratetype=0"
TRACE = f"""\
# tracer: nop
          python-1403    (   1403) [001] ..... 17708.447684: {FIN}
   gloo_tcp_loop-1407    (   1403) [001] ..... 17708.937276: {ACK}
          python-1403    (   1403) [000] ..... 17708.938751: sys_exit_group(error_code: 1)
          python-1405    (   1405) [001] .n... 17708.938760: sys_exit_group(error_code: 1)
          python-1403    (   1403) [000] ..... 17708.940000: {DRAIN}
          python-1405    (   1405) [001] ..... 17708.940100: {DRAIN}
   gloo_tcp_loop-1407    (   1403) [001] ..... 17708.950000: {DRAIN}
 pt_gloo_runloop-1413    (   1403) [000] ..... 17708.963946: {FIN}
          python-1403    (   1403) [000] ..... 17708.964100: {FIN}
          python-1403    (   1403) [000] ..... 17708.964200: {DRAIN}
"""


def test_the_first_fin_after_exit_group_of_the_same_thread_group() -> None:
    closing = exit_trace.exits(TRACE)
    assert closing.keys() == {1403}  # 1405 exited but sent no FIN in the trace
    assert closing[1403].to_fin_ms == pytest.approx(25.195, abs=1e-3)
    assert closing[1403].drained == 2  # the drains between its exit_group and its FIN only


def test_high_marks_are_read_for_every_cpu() -> None:
    highs = exit_trace.normal_zone_highs()
    assert len(highs) >= 1 and all(h >= 0 for h in highs)

"""NCCL watchdog lines become detections stamped by the watchdog's own clock."""

from __future__ import annotations

import time
from pathlib import Path

from bench.procs.events import EventWriter, read_events
from bench.run.watchdog import WatchdogLog, glog_wall_ns, watchdog_how

LINE = (
    "[rank1]:[E{md} {hms}.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=5000) ran for 5081 "
    "milliseconds before timing out."
)


def test_the_watchdogs_words_and_its_stamp() -> None:
    assert watchdog_how(LINE) == "nccl_watchdog_timeout"
    assert watchdog_how("NCCL INFO Bootstrap : Using eth0") is None
    now = time.time_ns()
    lt = time.localtime(now / 1e9)
    line = LINE.format(md=time.strftime("%m%d", lt), hms=time.strftime("%H:%M:%S", lt))
    stamp = glog_wall_ns(line, now)
    assert stamp is not None and abs(stamp - (int(now // 1e9) * 1_000_000_000 + 426_415_540)) < 1_000


def test_a_watchdog_line_in_a_ranks_log_is_that_ranks_detection(tmp_path: Path) -> None:
    harness = EventWriter(tmp_path / "harness.jsonl", src="harness")
    watch = WatchdogLog(tmp_path, harness)
    lt = time.localtime(time.time() - 1)  # the line was written a moment before it is read
    line = LINE.format(md=time.strftime("%m%d", lt), hms=time.strftime("%H:%M:%S", lt))
    log = tmp_path / "rank1-4242.log"
    log.write_text("NCCL INFO init\n" + line[:40])  # an unfinished line waits for its end
    watch.poll()
    assert not [e for e in read_events(tmp_path) if e["event"] == "detect"]
    with open(log, "a") as fh:
        fh.write(line[40:] + "\n")
    watch.poll()
    (d,) = [e for e in read_events(tmp_path) if e["event"] == "detect"]
    assert (d["src"], d["rank"], d["pid"], d["how"], d["stamp"]) == ("rank", 1, 4242, "nccl_watchdog_timeout", "log")
    assert d["t"] <= time.monotonic_ns()

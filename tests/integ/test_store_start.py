"""A trial's store: its port is known before its process serves, so ranks start while a
spawned store is still importing torch, and a client that connects that early is
answered once it serves (``LocalLauncher.start_store``)."""

from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from bench.procs.hygiene import marked_pids
from bench.procs.launcher import LaunchError, LocalLauncher, ProcessHost

pytestmark = pytest.mark.integ


@pytest.mark.timeout(120)
def test_a_client_that_connects_before_the_store_serves_is_answered(host: ProcessHost, tmp_path: Path) -> None:
    launcher = LocalLauncher(host=host, start_method="spawn", trial_dir=tmp_path, events_dir=tmp_path)
    try:
        port = launcher.start_store(wait=False)
        box: dict[str, Any] = {"asked_at": time.monotonic_ns()}

        def early_client() -> None:
            client = dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=60))
            client.set("early", "answered")
            box["value"] = client.get("early").decode()

        thread = threading.Thread(target=early_client)
        thread.start()
        launcher.await_store()
        thread.join(timeout=60)
        (log,) = tmp_path.glob("store-*.jsonl")
        served_at = json.loads(log.read_text().splitlines()[0])
        assert served_at["event"] == "proc_start" and served_at["port"] == port
        # The client asked before the store process served (it imports torch first) ...
        assert box["asked_at"] < served_at["t"]
        # ... and was answered once it did.
        assert box.get("value") == "answered"
    finally:
        launcher.close()
    assert set(marked_pids(host.run_id)) <= host.infrastructure()


@pytest.mark.timeout(60)
def test_a_store_that_dies_before_serving_is_a_launch_error(host: ProcessHost, tmp_path: Path) -> None:
    launcher = LocalLauncher(host=host, start_method="spawn", trial_dir=tmp_path, events_dir=tmp_path)
    try:
        launcher.start_store(wait=False)
        assert launcher.store_process is not None
        launcher.store_process.kill()
        with pytest.raises(LaunchError, match="the store exited"):
            launcher.await_store(timeout_s=30)
    finally:
        launcher.close()

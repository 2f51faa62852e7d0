"""What each Ray node holds in memory: Ray's own processes apart from the training workers.

The harness's resource sampler (``measure.resources``) sees every process of the trial
but not which Ray node it belongs to. A node is its ``ray start`` process and everything
below it (GCS and dashboard on the head, raylet, agents, the idle worker pool, the train
controller and the worker actors); the driver runs on the head. Once a second, each
node's resident memory (``VmRSS``) is summed in three parts: the training workers (Ray
titles their processes ``ray::RayTrainWorker``), the driver (on h0), and the rest, Ray's
own. The peaks of each part are reported per node (``ray_memory``): a peak between two
samples can be missed, and the parts' peaks need not fall in one sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from injectors.signals import descendants

WORKER_TITLE = b"RayTrainWorker"


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def is_worker(pid: int) -> bool:
    try:
        return WORKER_TITLE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@dataclass
class Peaks:
    ray: int = 0
    workers: int = 0
    driver: int = 0
    total: int = 0
    ray_processes: int = 0
    samples: int = 0


@dataclass
class NodeMemory:
    nodes: dict[int, Peaks] = field(default_factory=dict)

    def sample(self, roots: dict[int, int], driver: int) -> None:
        """One sample: ``roots`` maps each node to its ``ray start`` process."""
        for node, root in roots.items():
            ray = workers = 0
            count = 0
            for pid in [root, *descendants(root)]:
                rss = rss_bytes(pid)
                if is_worker(pid):
                    workers += rss
                elif rss:
                    ray += rss
                    count += 1
            drv = rss_bytes(driver) if node == 0 else 0
            p = self.nodes.setdefault(node, Peaks())
            p.ray, p.workers, p.driver = max(p.ray, ray), max(p.workers, workers), max(p.driver, drv)
            p.total = max(p.total, ray + workers + drv)
            p.ray_processes = max(p.ray_processes, count)
            p.samples += 1

    def report(self) -> dict[str, Any]:
        """Per node (``h0``...): the peaks in bytes, and the sampling that found them."""
        return {
            "nodes": {f"h{n}": vars(p) for n, p in sorted(self.nodes.items())},
            "how": "VmRSS of each node's process tree, sampled once a second; peaks per part",
        }


def table(run_dir: Path) -> list[str]:
    """Markdown rows: per point and node, the median over trials of each part's peak (MB)."""
    import json
    import statistics

    rows: dict[tuple[str, str], list[dict[str, int]]] = {}
    for path in sorted(run_dir.glob("events/*/*/job.jsonl")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e.get("event") == "ray_memory":
                for node, peaks in e["nodes"].items():
                    rows.setdefault((path.parent.parent.name, node), []).append(peaks)
    out = [
        "| point | node | Ray's own processes (MB) | Ray's processes | training workers (MB) | driver (MB) "
        "| node total (MB) | trials |"
    ]
    out.append("|---|---|---|---|---|---|---|---|")
    for (point, node), peaks in sorted(rows.items()):

        def med(key: str, peaks: list[dict[str, int]] = peaks) -> float:
            return statistics.median(p[key] for p in peaks)

        mb = {k: f"{med(k) / 1e6:.0f}" for k in ("ray", "workers", "driver", "total")}
        out.append(
            f"| {point[:12]} | {node} | {mb['ray']} | {med('ray_processes'):.0f} | {mb['workers']} | "
            f"{mb['driver']} | {mb['total']} | {len(peaks)} |"
        )
    return out


if __name__ == "__main__":
    import sys

    sys.stdout.write("\n".join(table(Path(sys.argv[1]))) + "\n")

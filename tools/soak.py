"""Soak the harness's promises: interrupt runs at random and check that nothing is left
and nothing is lost.

    .venv/bin/python tools/soak.py --rounds 30 [--out DIR] [--seed 0] [--scenarios kill,partition,hosts]

Each round starts ``ftbench run`` on one of the scenarios in turn (a SIGKILL of one of
four DDP ranks under fail-stop and reinit; a partition of one host under reinit; two
hosts with agents of their own, a host's ranks killed under reinit; the last two need
root for network and time namespaces) and, at a random moment, kills what the round's
victim says: the harness (SIGKILL, SIGINT or SIGTERM in turn); on two hosts also one
host agent (SIGKILL), or an agent and then the harness. It checks, 2 s after the harness
is gone: no process of the run, no network namespace, link, firewall rule or qdisc of
ftbench's. Then it resumes the run (``ftbench run --resume``) to completion and checks
that every trial of every point is in trials.jsonl exactly once, whole. It prints one
line per round and a summary, and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs.hygiene import alive, marked, stat_fields  # noqa: E402
from injectors.link.system import tag_for  # noqa: E402

KILL = """
name = "soak-kill"
[workload]
kind = "ddp"
world_size = 4
steps = 120
pg_timeout_s = 5
[[faults]]
kind = "kill"
target = { ranks = [2] }
trigger = { at_step = 40, jitter = "step" }
[measure]
trials = 3
deadline_s = 60
[sweep]
"recovery.strategy" = ["failstop", "reinit"]
"""

PARTITION = """
name = "soak-partition"
[workload]
kind = "ddp"
world_size = 3
steps = 150
pg_timeout_s = 3
[[faults]]
kind = "partition"
duration_s = 4
target = { ranks = [1] }
trigger = { at_step = 30 }
[recovery]
strategy = "reinit"
[measure]
trials = 3
deadline_s = 60
"""

TWO_HOSTS = """
name = "soak-hosts"
[workload]
kind = "ddp"
world_size = 4
steps = 150
pg_timeout_s = 5
[launch]
ranks_per_host = 2
agents = true
[[faults]]
kind = "kill"
target = { host = 1 }
trigger = { at_step = 50, jitter = "step" }
[recovery]
strategy = "reinit"
[measure]
trials = 3
deadline_s = 60
"""

SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)
VICTIMS = ("harness", "agent", "both")
"""What a two-host round kills, in turn: the harness, one host agent, or an agent then the harness."""


def runs_of(harness: int) -> set[str]:
    """Run ids of the marked processes descended from ``harness``: this round's run, and
    not the runs other work on the machine may have going at the same time."""
    runs = marked()
    parents = {pid: int(fields[1]) for pid in runs if len(fields := stat_fields(pid)) > 1}
    found = set()
    for pid, run in runs.items():
        node = pid
        for _ in range(64):
            if node == harness:
                found.add(run)
                break
            node = parents.get(node, 0)
            if node <= 1:
                break
    return found


def ftbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def network_leftovers() -> list[str]:
    found = []
    for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"], ["iptables-save"], ["tc", "qdisc", "show"]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        except FileNotFoundError:
            continue
        found += [f"{argv[0]}: {line.strip()}" for line in out.splitlines() if "ftb" in line]
    return found


def run_dir(out: Path) -> Path | None:
    runs = sorted(out.glob("*/*/run.json"))
    return runs[-1].parent if runs else None


def completeness(run: Path) -> tuple[int, int, int]:
    """(trials expected, trials found whole, trials duplicated or torn) of a finished run."""
    info = json.loads((run / "run.json").read_text())
    expected = len(info["points"]) * int(info["trials"])
    rows = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines() if line.strip()]
    counts = Counter((r["point_hash"], r["trial"]) for r in rows if not r.get("reference"))
    per_trial = {key: int(r.get("trial_rows") or 1) for r in rows for key in [(r["point_hash"], r["trial"])]}
    whole = sum(1 for key, n in counts.items() if n == per_trial[key])
    bad = sum(1 for key, n in counts.items() if n != per_trial[key])
    return expected, whole, bad


def agents_of(runs: set[str]) -> list[int]:
    """Live host agents (``python -m bench host``) of the given runs."""
    found = []
    for pid, run in marked().items():
        if run not in runs or not alive(pid):
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench" in argv and b"host" in argv:
            found.append(pid)
    return found


def one_round(i: int, scenario: Path, rng: random.Random, out: Path, victim: str, sig: int) -> dict[str, object]:
    before = set(marked())
    harness = subprocess.Popen(
        ftbench("run", str(scenario), "--out", str(out)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait = rng.uniform(3.0, 25.0)
    time.sleep(wait)
    ours = runs_of(harness.pid)
    agents = agents_of(ours) if victim != "harness" else []
    if agents:
        os.kill(rng.choice(agents), signal.SIGKILL)
    if harness.poll() is None and victim != "agent":
        if victim == "both":
            time.sleep(rng.uniform(0.0, 2.0))
        harness.send_signal(sig)
    try:
        harness.wait(timeout=90 if victim != "agent" else 600)
    except subprocess.TimeoutExpired:
        harness.kill()
        harness.wait()
    time.sleep(2.0)
    left = [p for p, run in marked().items() if p not in before and run in ours and alive(p)]
    net = [line for line in network_leftovers() if any(tag_for(run) in line for run in ours)]
    run = run_dir(out)
    resumed = None
    if run is not None:
        resumed = subprocess.run(
            ftbench("run", "--resume", str(run)), cwd=ROOT, capture_output=True, text=True, timeout=1800
        ).returncode
    expected, whole, bad = completeness(run) if run is not None and resumed == 0 else (0, 0, 0)
    ok = not left and not net and resumed == 0 and whole == expected and bad == 0
    return {
        "round": i + 1,
        "scenario": scenario.stem,
        "victim": victim if victim == "harness" or agents else f"{victim} (no agent was up)",
        "signal": signal.Signals(sig).name if victim != "agent" else "-",
        "after_s": round(wait, 1),
        "processes_left": len(left),
        "network_left": len(net),
        "resume_exit": resumed,
        "trials_expected": expected,
        "trials_whole": whole,
        "trials_bad": bad,
        "ok": ok,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--scenarios", default="kill,partition,hosts", help="which, comma-separated")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = args.out or Path(tempfile.mkdtemp(prefix="ftbench-soak-"))
    base.mkdir(parents=True, exist_ok=True)
    texts = {"kill": KILL, "partition": PARTITION, "hosts": TWO_HOSTS}
    scenarios = []
    for name in args.scenarios.split(","):
        if name not in texts:
            ap.error(f"--scenarios: {name!r} is none of {', '.join(texts)}")
        if name != "kill" and os.geteuid() != 0:
            print(f"soak: {name} needs root (namespaces); left out", file=sys.stderr)
            continue
        scenarios.append(base / f"soak-{name}.toml")
        scenarios[-1].write_text(texts[name])
    results = []
    for i in range(args.rounds):
        scenario = scenarios[i % len(scenarios)]
        victim = VICTIMS[(i // len(scenarios)) % len(VICTIMS)] if scenario.stem == "soak-hosts" else "harness"
        # Signals turn over rounds, and shift once per turn of the victims, so that every
        # victim meets every signal.
        sig = SIGNALS[(i + i // (len(scenarios) * len(VICTIMS))) % len(SIGNALS)]
        r = one_round(i, scenario, rng, base / f"round{i + 1:02d}", victim, sig)
        results.append(r)
        print(json.dumps(r), flush=True)
    failed = [r for r in results if not r["ok"]]
    signals = Counter(str(r["victim"]) + ("" if r["signal"] == "-" else f" {r['signal']}") for r in results)
    print(
        f"soak: {len(results)} rounds ({', '.join(f'{k} {v}' for k, v in sorted(signals.items()))}); "
        f"processes left {sum(int(str(r['processes_left'])) for r in results)}, network state left "
        f"{sum(int(str(r['network_left'])) for r in results)}, trials lost or duplicated "
        f"{sum(int(str(r['trials_expected'])) - int(str(r['trials_whole'])) for r in results)}; "
        f"{len(failed)} round(s) failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

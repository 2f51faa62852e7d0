#!/usr/bin/env python3
"""A node lost under a running job: what Slurm does and when, beside ftbench's figures.

    .venv/bin/python tools/slurm/node_loss.py WORKDIR [--timers test|slurm-defaults] [--set KEY=VALUE]
        [--how kill|cut] [--sbatch-option=--no-kill] [--ftbench-set workload.steps=3000]

Starts a two-node cluster (tools/slurm/localslurm.py) with the given timing knobs, submits
``tools/slurm/ftbench.sbatch node-loss-2hosts`` across both nodes (one reinit trial: the
harness in the batch shell on n0, one host agent per node), and when host h1's agent
stamps the scenario's fault (h1's ranks SIGKILLed at step 50) takes node n1 away with
it: ``kill`` SIGKILLs everything on n1 (slurmd, slurmstepd, the agent, what is left of
the job), ``cut`` unplugs n1 from the bridge. The job inside has then lost its second
node at the moment it lost its ranks there, and from there on the two views are
recorded on one clock (the machine's CLOCK_MONOTONIC, which every namespace shares):

* Slurm's: the nodes' and the job's states, polled every 0.2 s through scontrol (there is
  no accounting database, so no sacct), and slurmctld's, slurmd's and the job's own log
  lines after the loss, their millisecond timestamps (``LogTimeFormat=iso8601_ms``)
  placed on the same axis through the wall clock;
* ftbench's: the run's trials.csv (outcome, ttd_s, ttr_s ...) and run.json.

Everything goes to WORKDIR/timeline.json; a Markdown summary is printed. The cluster is
torn down at the end, also on failure or Ctrl-C. Standard library only; the job runs
``$FTBENCH`` (default: this Python's ``-m bench``, hence the venv's Python above).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import localslurm  # a sibling script, not a package

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm" / "ftbench.sbatch"
SCENARIO = "node-loss-2hosts"
NODE = "n1"
"""The node taken away: host h1's (srun's task 1), not the batch shell's n0."""
FIGURES = ("outcome", "ttd_s", "ttd_all_s", "ttr_s", "downtime_s", "steps_lost", "steps_done", "blame_correct", "error")
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$")


def find_inject(out: Path, host: str) -> dict[str, Any] | None:
    """The first ``inject`` event stamped by ``host``'s agent in any run under ``out``."""
    for path in out.glob(f"{SCENARIO}/*/events/*/*/agent-{host}.jsonl"):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if '"inject"' in line:
                try:
                    event: dict[str, Any] = json.loads(line)
                except json.JSONDecodeError:
                    continue  # half-written
                if event.get("event") == "inject":
                    return event
    return None


def log_lines(path: Path, since_wall: float) -> list[tuple[float, str]]:
    """``(wall time, text)`` of the timestamped lines of a Slurm log at or after ``since_wall``."""
    found = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        m = LOG_TIME.match(line)
        if m:
            wall = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
            if wall >= since_wall:
                found.append((wall, m.group(2)))
    return found


def run_status(out: Path) -> str:
    """The ftbench run's status in its run.json (``running``, ``complete``, ``interrupted``)."""
    runs = sorted(out.glob(f"{SCENARIO}/*/run.json"))
    try:
        return str(json.loads(runs[-1].read_text()).get("status")) if runs else "none"
    except (OSError, json.JSONDecodeError):
        return "unreadable"  # being rewritten


def last_steps(out: Path) -> dict[str, float]:
    """Each rank's last ``step_end`` (rank -> CLOCK_MONOTONIC, s): when the survivors stopped
    training, whatever stopped them (their last step, or Slurm)."""
    found: dict[str, float] = {}
    for path in out.glob(f"{SCENARIO}/*/events/*/*/rank*-*.jsonl"):
        rank = path.name.split("-")[0]
        for line in path.read_text(errors="replace").splitlines():
            if '"step_end"' in line:
                with contextlib.suppress(json.JSONDecodeError, KeyError):
                    found[rank] = max(found.get(rank, 0.0), json.loads(line)["t"] / 1e9)
    return found


def ftbench_figures(out: Path) -> dict[str, Any]:
    """The run's status and trials.csv rows (the figures of :data:`FIGURES`); empty if none."""
    runs = sorted(out.glob(f"{SCENARIO}/*/run.json"))
    if not runs:
        return {}
    rundir = runs[-1].parent
    info = json.loads(runs[-1].read_text())
    rows = []
    if (rundir / "trials.csv").exists():
        with (rundir / "trials.csv").open() as f:
            rows = [{k: r.get(k, "") for k in ("strategy", *FIGURES)} for r in csv.DictReader(f)]
    return {"rundir": str(rundir), "status": info.get("status"), "trials": rows}


def experiment(
    workdir: Path,
    *,
    timers: dict[str, str],
    settings: dict[str, str] | None = None,
    how: str = "kill",
    sbatch_options: tuple[str, ...] = (),
    ftbench_set: tuple[str, ...] = (),
    ftbench: str | None = None,
    start_deadline_s: float = 600.0,
) -> dict[str, Any]:
    """Run the experiment of the module's docstring in ``workdir``; return the timeline.

    ``ftbench_set`` are ``KEY=VALUE`` overrides of the scenario (``workload.steps=3000``: a
    job still training when Slurm reacts). Every wait has a deadline: ``start_deadline_s``
    for the trial to reach its fault, then ``SlurmdTimeout`` + ``KillWait`` + 3 x
    ``MessageTimeout`` + 120 s for Slurm to settle.
    """
    workdir = Path(workdir).resolve()
    out = workdir / "results"
    slurm = localslurm.LocalSlurm(workdir / "cluster", nodes=2, timers=timers, settings=settings)
    knobs: dict[str, str] = {
        k: slurm.settings[k] for k in ("SlurmdTimeout", "KillWait", "MessageTimeout") if k in slurm.settings
    }
    knobs.update({k: v for k, v in slurm.settings.items() if k not in localslurm.TEST_TIMERS})
    env = {
        "FTBENCH": ftbench or os.environ.get("FTBENCH") or f"{sys.executable} -m bench",
        "FTBENCH_WAIT_S": "300",
    }
    result: dict[str, Any] = {
        "how": how,
        "knobs": knobs,
        "sbatch_options": list(sbatch_options),
        "ftbench_set": list(ftbench_set),
    }
    with slurm:
        args = [SCENARIO, "--trials", "1", "--set", 'sweep.recovery.strategy=["reinit"]', "--out", str(out)]
        for pair in ftbench_set:
            args += ["--set", pair]
        options = ("--nodes=2", "--ntasks-per-node=1", *sbatch_options)
        job = slurm.sbatch(SCRIPT, *args, options=options, env=env, cwd=workdir)
        result["job"] = job
        deadline = time.monotonic() + start_deadline_s
        asked = 0.0
        while (inject := find_inject(out, "h1")) is None:
            if time.monotonic() - asked > 1.0:  # scontrol takes 10-300 ms here: not every 10 ms
                state, asked = slurm.job_state(job), time.monotonic()
                if state in localslurm.FINAL_STATES or asked > deadline:
                    raise RuntimeError(f"job {job} {state} before h1 stamped its fault:\n{slurm.job_output(job)}")
            time.sleep(0.01)
        t_loss = slurm.lose_node(NODE, how)
        wall_loss = time.time() - (time.monotonic() - t_loss)
        result["inject_to_loss_s"] = t_loss - inject["t"] / 1e9
        timeline: list[tuple[float, str, str]] = []
        last: dict[str, str] = {}
        settle = (
            float(slurm.settings.get("SlurmdTimeout", 300))
            + float(slurm.settings.get("KillWait", 30))
            + 3 * float(slurm.settings.get("MessageTimeout", 10))
            + 120
        )
        deadline = t_loss + settle
        requeued = False
        while time.monotonic() < deadline:
            # Each state is stamped when its query returned: Slurm had it by then.
            seen: dict[str, tuple[float, str]] = {}
            for n in slurm.nodes:
                node_state = slurm.node_state(n)
                seen[f"node {n}"] = (time.monotonic(), node_state)
            job_info = slurm.show("job", str(job))
            seen["job"] = (time.monotonic(), f"{job_info.get('JobState', '?')} (Reason={job_info.get('Reason', '?')})")
            status = run_status(out)
            seen["ftbench run"] = (time.monotonic(), status)
            for k, (t, v) in seen.items():
                if last.get(k) != v:
                    timeline.append((round(t - t_loss, 2), k, v))
                    last[k] = v
            state = job_info.get("JobState", "")
            requeued = requeued or int(job_info.get("Restarts", "0") or 0) > 0
            down = "DOWN" in seen[f"node {NODE}"][1]
            if down and (state in localslurm.FINAL_STATES or (requeued and state == "PENDING")):
                break
            time.sleep(0.2)
        else:
            result["settled"] = False
        result["states"] = [{"t_s": t, "what": k, "state": v} for t, k, v in timeline]
        logs = {
            "slurmctld": slurm.log("slurmctld"),
            "slurmd-n0": slurm.log("slurmd-n0"),
        }
        result["logs"] = {
            name: [{"t_s": round(w - wall_loss, 3), "line": text} for w, text in log_lines(path, wall_loss - 1)]
            for name, path in logs.items()
        }
        result["job_output"] = [
            line
            for line in slurm.job_output(job).splitlines()
            if line.startswith(("srun", "slurmstepd")) or "CANCELLED" in line
        ]
        result["ftbench"] = ftbench_figures(out)
        result["last_step_s"] = {r: round(t - t_loss, 3) for r, t in sorted(last_steps(out).items())}
    result["left_namespaces"] = [ns for ns in slurm.namespaces if ns in localslurm.leftover_namespaces()]
    result["left_processes"] = slurm.namespace_pids()
    (workdir / "timeline.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def summary(result: dict[str, Any]) -> str:
    """The timeline as Markdown: Slurm's states and log lines after the loss, ftbench's rows."""
    lines = [
        f"knobs: {' '.join(f'{k}={v}' for k, v in result['knobs'].items())}; node lost by {result['how']}; "
        f"sbatch {' '.join(result['sbatch_options']) or '(defaults)'}; "
        f"ftbench --set {' '.join(result['ftbench_set']) or '(none)'}; "
        f"the loss came {result['inject_to_loss_s'] * 1000:.0f} ms after ftbench's fault",
        "",
        "| t after the loss (s) | what | state or log line |",
        "|---|---|---|",
    ]
    rows = [(s["t_s"], s["what"], s["state"]) for s in result["states"]]
    for name, entries in result["logs"].items():
        rows += [(e["t_s"], name, e["line"]) for e in entries]
    for t, what, text in sorted(rows, key=lambda r: r[0]):
        lines.append(f"| {t:.2f} | {what} | {text.replace('|', '/')} |")
    fb = result.get("ftbench") or {}
    lines += ["", f"ftbench run: {fb.get('status')} ({fb.get('rundir')})"]
    last = " ".join(f"{r} {t:.2f}" for r, t in result.get("last_step_s", {}).items())
    lines.append(f"  each rank's last step, s after the loss: {last}")
    for row in fb.get("trials", []):
        lines.append("  " + " ".join(f"{k}={v}" for k, v in row.items() if v != ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="node_loss", description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=Path)
    p.add_argument("--timers", choices=("test", "slurm-defaults"), default="test")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a slurm.conf setting")
    p.add_argument("--how", choices=("kill", "cut"), default="kill")
    p.add_argument("--sbatch-option", action="append", default=[], help="e.g. --sbatch-option=--no-requeue")
    p.add_argument("--ftbench-set", action="append", default=[], metavar="KEY=VALUE", help="a scenario override")
    p.add_argument("--ftbench", help="the ftbench command (default: $FTBENCH, else this Python's -m bench)")
    args = p.parse_args(argv)
    timers = localslurm.TEST_TIMERS if args.timers == "test" else localslurm.SLURM_DEFAULT_TIMERS
    settings = localslurm.parse_settings(args.set)
    try:
        result = experiment(
            args.workdir,
            timers=dict(timers),
            settings=settings,
            how=args.how,
            sbatch_options=tuple(args.sbatch_option),
            ftbench_set=tuple(args.ftbench_set),
            ftbench=args.ftbench,
        )
    except localslurm.SlurmUnavailable as e:
        print(f"node_loss: {e}", file=sys.stderr)
        return 2
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

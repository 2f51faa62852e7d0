"""``ftbench run``: every point of a scenario, ``trials`` times, into one results directory.

Trials run one after another (they share the machine, and figures are latencies). Each
finished trial is written to disk before the next starts; an interrupt (Ctrl-C,
SIGTERM) ends the current trial cleanly, keeps the finished ones and marks the run
``interrupted`` so that ``--resume`` can complete it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bench
from bench.jobs.job import TrialContext
from bench.procs import machine, venvs
from bench.procs.launcher import ProcessHost
from bench.results.facts import TrialFacts
from bench.results.summary import point_stats
from bench.results.walltime import wall_summary
from bench.results.writer import HOLDER_ENV, VERSION_COLUMNS, RunDir, write_failure
from bench.run.preflight import exposure, stage_overhead
from bench.run.trial import TrialResult, run_trial, unavailable
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.loader import expand, identity, parse
from bench.scenario.model import Point, Scenario
from bench.scenario.requirements import parse as parse_requirements

if TYPE_CHECKING:
    from bench.hosts.cluster import Cluster

Progress = Callable[[str], None]
ENV_SPEC = "FTBENCH_ENV_SPEC"
"""Set in a child harness: the environment (``launch.env``) it runs in."""


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass
class RunReport:
    rundir: RunDir
    status: str
    stats: dict[str, dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)
    """point label -> why it could not run here."""


def run(
    scenario: Scenario,
    *,
    out: str | Path = "results",
    trials: int | None = None,
    resume: RunDir | None = None,
    progress: Progress = _stderr,
    argv: list[str] | None = None,
    host: ProcessHost | None = None,
    only: set[str] | None = None,
    cluster: Cluster | None = None,
) -> RunReport:
    """Run the scenario; ``host`` lets several runs share one forkserver (tests do);
    ``only`` restricts the run to these point hashes (a child harness running the
    points of one environment, see :meth:`Session.run_point`); ``cluster``: the host
    agents the cluster started, which the run waits for, uses and then dismisses."""
    if trials is not None:
        scenario = replace(scenario, measure=replace(scenario.measure, trials=trials))
    rundir = resume or RunDir.create(out, scenario.name, machine.commit())
    rundir.lock(argv or sys.argv)
    try:
        return _run(scenario, rundir, resume, progress, argv, host, only, cluster)
    except OSError as err:
        failure = write_failure(err, rundir.path)
        if failure is None:
            raise
        raise failure from None
    finally:
        rundir.unlock()


def _run(
    scenario: Scenario,
    rundir: RunDir,
    resume: RunDir | None,
    progress: Progress,
    argv: list[str] | None,
    host: ProcessHost | None,
    only: set[str] | None,
    cluster: Cluster | None,
) -> RunReport:
    pts, refused = expand(scenario)
    info = rundir.read_run_json() or _initial_info(scenario, pts, argv)
    if resume is not None:
        for note in rundir.repair():  # a run cut short: only whole trials count
            progress(f"  resume: {note}")
    info["status"] = "running"
    rundir.write_run_json(info)
    n = scenario.measure.trials
    pts = [p for p in pts if only is None or p.point_hash in only]
    progress(f"ftbench: {scenario.name}: {len(pts)} point(s) x {n} trial(s) -> {rundir.path}")
    session = Session(rundir=rundir, info=info, done=rundir.finished(), progress=progress, trials=n, total=len(pts) * n)
    for name, why in refused.items():
        session.skipped[name] = why
        progress(f"  skipped: {name}: {why}")
    session.cluster = cluster
    status = "interrupted"
    error: BaseException | None = None
    try:
        if cluster is not None:
            w = [p.scenario for p in pts]
            cluster.open(max((s.workload.world_size // s.launch.ranks_per_host for s in w), default=0), progress)
            info["cluster"] = {h: dataclasses.asdict(a) for h, a in cluster.agents.items()}
        with contextlib.nullcontext(host) if host else ProcessHost() as session.host:
            info.setdefault("versions", machine.versions())
            info.setdefault("machine", machine.host())
            if scenario.measure.interleave:
                for trial in range(n):
                    for point in pts:
                        session.run_point(point, [trial])
            else:
                for point in pts:
                    session.run_point(point)
        status = "complete" if only is None else "running"  # a child harness: the parent ends the run
    except BaseException as err:  # re-raised below, once run.json says how far the run got
        error = err
    if cluster is not None:
        cluster.close()
    rows = rundir.rows()  # read once: the statistics and the wall-time medians both need them
    stats = point_stats(rows)
    info.update(status=status, finished=_now(), stats=stats, skipped=session.skipped, wall=wall_summary(rows))
    try:
        rundir.write_run_json(info)
    except OSError:
        if error is None:
            raise
        # The disk that failed the run fails this too: trials.jsonl is the record.
    if error is not None:
        raise error
    return RunReport(rundir=rundir, status=status, stats=stats, skipped=session.skipped)


@dataclass
class Session:
    """One ``ftbench run`` in progress: where it writes, what it has done."""

    rundir: RunDir
    info: dict[str, Any]
    """run.json as it is being written."""
    done: set[tuple[str, int, bool]]
    """Trials already recorded (a resumed run skips them)."""
    progress: Progress
    trials: int
    total: int
    counter: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    cluster: Cluster | None = None
    prepared: dict[str, tuple[str, TrialFacts | None]] = field(default_factory=dict)
    """Per point hash, checked and with its reference run: (backend, reference facts)."""
    host: ProcessHost = field(init=False)

    def run_point(self, point: Point, trials: Sequence[int] | None = None) -> None:
        """Trials ``trials`` (every one by default) of ``point``, after its reference, or
        why it cannot run here. A point of another environment (``launch.env``) runs
        whole in a child harness started with that environment's interpreter. An
        interleaved run calls this once per trial index: the checks and the reference
        happen on the first call only."""
        todo = list(range(self.trials)) if trials is None else list(trials)
        spec = " ".join(parse_requirements(point.scenario.launch.env))
        if spec != os.environ.get(ENV_SPEC, ""):
            if point.point_hash not in self.prepared:
                self.prepared[point.point_hash] = ("", None)
                self._in_environment(point, spec)
            return
        if point.label in self.skipped:
            self.counter += len(todo)
            return
        if point.point_hash not in self.prepared:
            try:
                w = point.scenario.workload
                backend = machine.resolve_backend(w.backend, w.world_size)
                machine.resolve_device(w.device, backend)  # CUDA asked for on a machine without: why
                why = unavailable(point.scenario, cluster=self.cluster is not None)
                if backend != "nccl" and point.scenario.launch.nccl.environment():
                    why = (
                        f"launch.nccl is set but this point runs on {backend} (no GPU here): the NCCL knobs would "
                        "not apply"
                    )
                if why:
                    raise RuntimeError(why)
            except RuntimeError as err:
                self.skipped[point.label] = str(err)
                self.progress(f"  skip {point.label}: {err}")
                self.counter += len(todo)
                return
            stage_overhead(point.scenario, self.info, self.progress, run_id=self.host.run_id)
            exposure(point.scenario, self.info, self.progress, cluster=self.cluster is not None)
            reference = _reference(point, self.host, self.rundir, backend, self.done, self.progress, self.cluster)
            self.prepared[point.point_hash] = (backend, reference)
        backend, reference = self.prepared[point.point_hash]
        for trial in todo:
            self.counter += 1
            if (point.point_hash, trial, False) in self.done:
                continue
            result = run_trial(
                context(point, trial, self.host, self.rundir, backend, fault_free=False, cluster=self.cluster),
                reference=reference,
            )
            record(self.rundir, point, trial, backend, result, reference=False)
            self.progress(_progress_line(self.counter, self.total, point, trial, self.trials, result))
            if result.outcome == "interrupted":
                raise KeyboardInterrupt
            # One entry per strategy and environment: a stack may take another path on
            # another torch (torchft's process group on torch's native reconfigure, say).
            name = point.scenario.recovery.strategy + (f" @ {spec}" if spec else "")
            self.info.setdefault("strategy_versions", {}).setdefault(name, result.versions)
            if result.clocks:  # per host: offset to the harness's clock and its uncertainty
                self.info.setdefault("host_clocks", {}).setdefault(point.point_hash, {})[str(trial)] = result.clocks
                self.rundir.write_run_json(self.info)

    def _in_environment(self, point: Point, spec: str) -> None:
        """Run ``point`` in a child harness in the environment of ``spec``; its rows go to
        this run's directory, its versions into run.json's ``environments``."""
        try:
            env = venvs.prepare(spec, progress=self.progress)
        except (venvs.EnvBuildError, OSError) as err:
            self.skipped[point.label] = f"environment {spec!r}: {err}"
            self.progress(f"  skip {point.label}: environment {spec!r}: {err}")
            self.counter += self.trials
            return
        self.info.setdefault("environments", {})[env.spec] = env.versions
        self.rundir.write_run_json(self.info)
        self.progress(f"  {point.label}: in environment {env.spec!r} ({env.python})")
        argv = [
            env.python,
            "-m",
            "bench",
            "run",
            "--resume",
            str(self.rundir.path),
            "--point",
            point.point_hash,
            "--trials",
            str(self.trials),
        ]
        # FTBENCH_HARNESS_PATH: the environment's .pth appends ftbench and the harness's
        # packages after its own; the child's processes (ranks, agents) inherit it.
        environ = venvs.child_environ() | {ENV_SPEC: env.spec, HOLDER_ENV: str(os.getpid())}
        code = subprocess.run(argv, env=environ, check=False).returncode
        child = self.rundir.read_run_json()
        for key in ("strategy_versions", "exposure", "skipped"):
            for name, value in (child.get(key) or {}).items():
                (self.skipped if key == "skipped" else self.info.setdefault(key, {})).setdefault(name, value)
        self.done |= self.rundir.finished()
        self.counter += self.trials
        if code == 130:
            raise KeyboardInterrupt
        if code != 0:
            self.skipped.setdefault(point.label, f"the harness in environment {spec!r} exited with {code}")


def resume_scenario(rundir: RunDir) -> tuple[Scenario, int]:
    """The scenario (overrides included) and trial count a run directory was made with;
    a run.json that cannot say is a ConfigError naming it, never a traceback."""
    file = str(rundir.path / "run.json")
    try:
        info = rundir.read_run_json()
    except (OSError, ValueError) as err:
        raise ConfigError(file, "", "a readable run.json", str(err)) from None
    if not info:
        raise ConfigError(file, "", "a results directory holding run.json")
    try:
        sc = info["scenario"]
        raw = dict(sc["raw"]) | {"sweep": sc.get("sweep", {})}
        trials = int(info["trials"])
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(file, "scenario", "the scenario and trial count ftbench run wrote", str(err)) from None
    return parse(raw, file=str(sc.get("source") or file)), trials


def _reference(
    point: Point,
    host: ProcessHost,
    rundir: RunDir,
    backend: str,
    done: set[tuple[str, int, bool]],
    progress: Progress,
    cluster: Cluster | None,
) -> TrialFacts | None:
    """Run (or reuse) the point's fault-free reference trial, if the scenario asks for one."""
    if not point.scenario.measure.reference:
        return None
    ctx = context(point, 0, host, rundir, backend, fault_free=True, cluster=cluster)
    if (point.point_hash, 0, True) in done:
        from bench.procs.events import read_events
        from bench.results.facts import trial_facts

        w = point.scenario.workload
        return trial_facts(read_events(ctx.events_dir), steps=w.steps, warmup_steps=w.warmup_steps)
    result = run_trial(ctx)
    record(rundir, point, 0, backend, result, reference=True)
    progress(
        f"  reference {point.label}: {result.faults[0].outcome}, median step "
        f"{result.facts.ff_step_s * 1e3:.2f} ms, final loss {result.facts.final_loss:.6g} "
        f"({result.wall_s:.1f} s)"
    )
    if result.outcome == "interrupted":
        raise KeyboardInterrupt
    return result.facts


def context(
    point: Point,
    trial: int,
    host: ProcessHost,
    rundir: RunDir,
    backend: str,
    *,
    fault_free: bool,
    cluster: Cluster | None = None,
) -> TrialContext:
    events_dir = rundir.events_dir(point, "reference" if fault_free else trial)
    return TrialContext(
        point=point,
        trial=trial,
        seed=point.scenario.measure.seed,
        trial_dir=events_dir.parent,
        events_dir=events_dir,
        host=host,
        backend=backend,
        deadline_s=point.scenario.measure.deadline_s,
        fault_free=fault_free,
        cluster=cluster,
    )


def record(rundir: RunDir, point: Point, trial: int, backend: str, result: TrialResult, *, reference: bool) -> None:
    if result.outcome == "interrupted":
        return  # a trial cut short is not a measurement; --resume runs it again
    rundir.check_room()  # the events of a trial that filled the disk are not whole
    rundir.add_trial(
        point,
        trial,
        reference=reference,
        backend=backend,
        faults=result.faults,
        facts=result.facts,
        wall_s=result.wall_s,
        events=result.events,
        # A job that runs in an interpreter of its own (a command job) says what it has.
        versions=machine.stack_versions() | {k: v for k, v in result.versions.items() if k in VERSION_COLUMNS},
    )


def _progress_line(counter: int, total: int, point: Point, trial: int, n: int, result: TrialResult) -> str:
    width = len(str(total))
    parts = []
    for f in result.faults:
        figs = " ".join(
            f"{k}={v:.3f}" for k in ("ttd_s", "ttd_all_s", "ttr_s") if (v := f.figures.get(k)) is not None and v == v
        )
        parts.append(f"{f.kind}: {f.outcome}" + (f" {figs}" if figs else ""))
    return (
        f"[{counter:>{width}}/{total}] {point.label}  trial {trial + 1}/{n}  "
        + "; ".join(parts)
        + f"  ({result.wall_s:.1f} s)"
    )


def _initial_info(scenario: Scenario, pts: list[Point], argv: list[str] | None) -> dict[str, Any]:
    return {
        "suite": "ftbench",
        "version": bench.__version__,
        "commit": machine.commit(),
        "created": _now(),
        "command": argv or sys.argv,
        "clock": machine.clock(),
        "knobs": machine.knobs(),
        "trials": scenario.measure.trials,
        "scenario": {
            "name": scenario.name,
            "description": scenario.description,
            "source": scenario.source,
            "raw": to_dict(dict(scenario.raw)),
            "sweep": {k: list(v) for k, v in scenario.sweep},
        },
        "points": [
            {
                "point_hash": p.point_hash,
                "label": p.label,
                "values": dict(p.values),
                "config": identity(p.scenario, drop_defaults=False),
            }
            for p in pts
        ],
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

"""What ``ftbench run kill-one-rank`` prints first, for real: one table with a units row
that has no column or row empty for every trial of its point, a ``-`` only where no
trial of the point has the figure, and one plain line per point.

The scenario as shipped, shrunk with ``--set`` to two forked ranks, one trial a point
and the kill at step 40 (as shipped: four ranks, five trials, the kill 20 s in)."""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]
SETS = (
    "workload.world_size=2",
    "faults.0.target={ranks=[1]}",
    'faults.0.trigger={at_step=40, jitter="step"}',
    "workload.steps=120",
    'launch.start_method="forkserver"',  # about the table, not how ranks start
)


def column(head: str, have: set[str]) -> str:
    """The trials.csv column a head of the table shows."""
    return next(c for c in (f"{head}_s", head, f"phase_{head}_s") if c in have)


@pytest.mark.timeout(300)
def test_kill_one_rank_prints_only_the_figures_its_points_have(tmp_path: Path) -> None:
    args = ["run", "kill-one-rank", "--trials", "1", "--out", str(tmp_path)]
    for s in SETS:
        args += ["--set", s]
    done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("point "))
    end = out.index("", start)
    head, units, *rows = out[start:end]
    names = re.split(r"\s{2,}", head.strip())
    assert names[:3] == ["point", "outcome", "ttd"], head
    numbers = names[2:]
    unit_cells = re.split(r"\s{2,}", units.strip())
    assert len(unit_cells) == len(numbers) and all(u in ("(ms)", "(s)", "(steps)", "(%)") for u in unit_cells), units
    assert "figure                      n     median" not in done.stdout, "the full list is --all-figures'"

    (rundir,) = (tmp_path / "kill-one-rank").iterdir()
    with open(rundir / "trials.csv") as fh:
        trials = list(csv.DictReader(fh))
    have = set(trials[0])
    cells = {}
    for row in rows:
        label, outcome, *values = re.split(r"\s{2,}", row.strip())
        assert len(values) == len(numbers), row
        assert any(v != "-" for v in values), f"{label}: a row empty for every trial of its point"
        assert outcome == next(f"{t['outcome']} 1" for t in trials if t["label"] == label), row
        cells[label] = dict(zip(numbers, values, strict=True))
    assert set(cells) == {"strategy=failstop", "strategy=reinit"}
    for name in numbers:
        assert any(c[name] != "-" for c in cells.values()), f"{name}: a column empty for every point"
        for label, c in cells.items():
            present = [t for t in trials if t["label"] == label and t[column(name, have)] != ""]
            assert (c[name] == "-") == (not present), (label, name, c[name])
    assert "ttr" in numbers and "catchup" in numbers and "detect" not in numbers

    lines = {line.split(":")[0]: line for line in out[end + 1 :] if line.startswith("strategy=")}
    failstop, reinit = (next(t for t in trials if t["label"] == f"strategy={s}") for s in ("failstop", "reinit"))
    assert failstop["outcome"] == "failed" and reinit["outcome"] == "recovered", (failstop, reinit)
    assert lines["strategy=failstop"].startswith("strategy=failstop: the kill of rank 1 was noticed after ")
    assert lines["strategy=failstop"].endswith("then the job stopped (failed in 1 of 1 trials)")
    ttr_ms = float(reinit["ttr_s"]) * 1e3
    said = re.search(r"training again ([\d.]+) (ms|s) later in 1 rank\b", lines["strategy=reinit"])
    assert said is not None, lines["strategy=reinit"]
    value = float(said.group(1)) * (1e3 if said.group(2) == "s" else 1)
    assert math.isclose(value, ttr_ms, rel_tol=5e-3), (said.group(0), ttr_ms)

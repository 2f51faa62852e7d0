"""Hostile scenario files and ``--set`` overrides (docs/design.md, "Bad input").

Each input is either refused with a :class:`ConfigError` whose one-line message names
the file and a key (a TOML or UTF-8 error: its line and column), or accepted, and then
every point of its sweep expands, is distinct and validates again on its own. Any other
exception, or a case that takes seconds, fails the test. The generators are in
``hostile.py``; the examples are derandomized, so CI sees the same ones every time.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings

from bench.cli import cli
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.limits import MAX_FAULTS, MAX_POINTS
from bench.scenario.loader import load, parse, points
from bench.scenario.model import Scenario
from bench.scenario.overrides import parse_override
from tests.unit.hostile import BASES, hostile_bytes, hostile_docs, hostile_overrides, toml

FILE_LEVEL = ("a readable file", "a regular file", "a file of at most", "valid TOML", "a file name without NUL")
"""What a refusal of the whole file expects (no key to name: it never got that far)."""
SLOW_S = 5.0


def fuzz(examples: int) -> settings:
    """Derandomized: the same examples on every run (``FTBENCH_FUZZ=N``: N random ones)."""
    extra = int(os.environ.get("FTBENCH_FUZZ", "0"))
    return settings(
        max_examples=extra or examples,
        deadline=3000,
        derandomize=not extra,
        database=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def refused(err: ConfigError, file: str) -> None:
    text = str(err)
    assert "\n" not in text and text.isprintable(), text
    assert err.file in (file, "--set") and text.startswith(err.file + ": "), text
    assert err.key or err.expected.startswith(FILE_LEVEL), f"no key named: {text}"


def sane(s: Scenario) -> None:
    """What every accepted point must be, whatever the file said."""
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", s.name)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", s.description)
    assert len(s.faults) <= MAX_FAULTS
    assert s.measure.seed * 1_000_003 + s.workload.steps < 2**63
    for value in _leaves(to_dict(s)):
        if isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, int):
            assert -(2**63) <= value < 2**63


def _leaves(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _leaves(v)
    elif isinstance(node, list):
        for v in node:
            yield from _leaves(v)
    else:
        yield node


def outcome(path: Path, overrides: Sequence[tuple[str, Any]] = ()) -> str:
    """Load ``path``: refused cleanly, or accepted and valid in every point."""
    start = time.perf_counter()
    try:
        sc = load(path, overrides)
    except ConfigError as err:
        refused(err, str(path))
        result = "refused"
    else:
        pts = points(sc)
        assert 1 <= len(pts) <= MAX_POINTS
        assert len({p.point_hash for p in pts}) == len(pts), "two points, one measurement"
        for p in pts[:3] + pts[-1:]:
            sane(p.scenario)
            again = points(parse(p.scenario.raw, file=str(path)))
            assert [q.point_hash for q in again] == [p.point_hash]
        result = "accepted"
    assert time.perf_counter() - start < SLOW_S
    return result


def test_bases_are_valid_and_round_trip(workdir: Path) -> None:
    for base in BASES:
        path = workdir / "base.toml"
        path.write_text(toml(base))
        assert outcome(path) == "accepted"


@fuzz(550)
@given(doc=hostile_docs())
def test_hostile_files(workdir: Path, doc: dict[str, Any]) -> None:
    path = workdir / "doc.toml"
    path.write_text(toml(doc))
    event(outcome(path))


@fuzz(200)
@given(data=hostile_bytes())
def test_hostile_bytes(workdir: Path, data: bytes) -> None:
    path = workdir / "bytes.toml"
    path.write_bytes(data)
    event(outcome(path))


@fuzz(150)
@given(text=hostile_overrides())
def test_hostile_overrides(workdir: Path, text: str) -> None:
    path = workdir / "base.toml"
    path.write_text(toml(BASES[0]))
    start = time.perf_counter()
    try:
        override = parse_override(text)
    except ConfigError as err:
        refused(err, str(path))
        assert time.perf_counter() - start < SLOW_S
        event("refused by parse_override")
        return
    event(outcome(path, [override]))


# --- the reviewer's examples, one by one ---------------------------------------------------

GOOD = """
name = "t"
[workload]
world_size = 4
steps = 100
pg_timeout_s = 5
[[faults]]
kind = "stall"
duration_s = 8
target = { ranks = [1] }
trigger = { at_step = 20 }
[recovery]
strategy = "reinit"
[measure]
deadline_s = 60
[gate]
metric = "ttr_s"
[sweep]
"recovery.strategy" = ["failstop", "reinit"]
"""
TORCHFT = ('strategy = "reinit"', 'strategy = "torchft"\n[recovery.torchft]\nmin_replicas = 2')
STALL = 'kind = "stall"\nduration_s = 8\ntarget = { ranks = [1] }\ntrigger = { at_step = 20 }'
AXIS = '"recovery.strategy"'
KILL_LATE = 'kind = "kill"\ntarget = { ranks = [1] }\ntrigger = { after_s = 4000 }'


def slo(text: str) -> tuple[str, str]:
    """Add a [[gate.slo]] entry of ttd_s with ``text``."""
    return 'metric = "ttr_s"', f'metric = "ttr_s"\n[[gate.slo]]\nmetric = "ttd_s"\n{text}'


def axis(text: str) -> tuple[str, str]:
    """Add a sweep axis before recovery.strategy's."""
    return AXIS, f"{text}\n{AXIS}"


EXAMPLES: dict[str, tuple[tuple[str, str], str]] = {
    "inf duration": (("duration_s = 8", "duration_s = inf"), "faults.0.duration_s"),
    "nan duration": (("duration_s = 8", "duration_s = nan"), "faults.0.duration_s"),
    "1e308 deadline": (("deadline_s = 60", "deadline_s = 1e308"), "measure.deadline_s"),
    "inf timeout": (("pg_timeout_s = 5", "pg_timeout_s = inf"), "workload.pg_timeout_s"),
    "nan slo": (slo("max = nan"), "gate.slo.0.max"),
    "1e308 slo": (slo("min = 1e308"), "gate.slo.0.min"),
    "slo min > max": (slo("min = 3\nmax = 1"), "gate.slo.0.max"),
    "gate.factor inf": (('metric = "ttr_s"', 'metric = "ttr_s"\nfactor = inf'), "gate.factor"),
    "stall past deadline": (("duration_s = 8", "duration_s = 3600"), "faults.0.duration_s"),
    "kill after deadline": ((STALL, KILL_LATE), "faults.0.trigger.after_s"),
    "stall ends after deadline": (("{ at_step = 20 }", "{ after_s = 55 }"), "faults.0.duration_s"),
    "every_s past deadline": (("{ at_step = 20 }", "{ every_s = 20, count = 3 }"), "faults.0.duration_s"),
    "lighthouse under reinit": (("{ ranks = [1] }", '{ component = "lighthouse" }'), "faults.0.target.component"),
    "min_replicas > world": (("min_replicas = 2", "min_replicas = 5"), "recovery.torchft.min_replicas"),
    "min_replica_size > world": (("min_replicas = 2", "min_replica_size = 9"), "recovery.torchft.min_replica_size"),
    "seed overflows": (("deadline_s = 60", "deadline_s = 60\nseed = 9223372036854775807"), "measure.seed"),
    "seed past 64 bits": (("deadline_s = 60", "deadline_s = 60\nseed = 18446744073709551616"), "measure.seed"),
    "steps past 64 bits": (("steps = 100", "steps = 1" + "0" * 30), "workload.steps"),
    "name ../../x": (('name = "t"', 'name = "../../x"'), "name"),
    "name absolute": (('name = "t"', 'name = "/tmp/x"'), "name"),
    "name newline": (('name = "t"', 'name = "a\\nb"'), "name"),
    "name ANSI": (('name = "t"', 'name = "\\u001b[31mred"'), "name"),
    "name NUL": (('name = "t"', 'name = "a\\u0000b"'), "name"),
    "name ..": (('name = "t"', 'name = ".."'), "name"),
    "name too long": (('name = "t"', f'name = "{"x" * 65}"'), "name"),
    "description ANSI": (('name = "t"', 'name = "t"\ndescription = "\\u001b[2J"'), "description"),
    "sweep name": (axis('"name" = ["a", "b"]'), "sweep.name"),
    "sweep trials": (axis('"measure.trials" = [1, 2]'), "sweep.measure.trials"),
    "sweep gate": (axis('"gate.factor" = [1.1, 2]'), "sweep.gate.factor"),
    "sweep repeat": (('["failstop", "reinit"]', '["failstop", "failstop"]'), "sweep.recovery.strategy.1"),
    "sweep 3 vs 3.0": (axis('"faults.0.duration_s" = [3, 3.0]'), "sweep.faults.0.duration_s"),
    "sweep unreached": (axis('"recovery.torchft.min_replicas" = [1, 2]'), "sweep.recovery.torchft.min_replicas"),
    "sweep inside sweep": (axis('"recovery" = [{}]'), "sweep.recovery.strategy"),
    "sweep too big": (('["failstop", "reinit"]', "[" + ", ".join(map(str, range(10_001))) + "]"), "sweep"),
    "kind a list": (('kind = "stall"', 'kind = ["stall"]'), "faults.0.kind"),
    "strategy a table": (('strategy = "reinit"', "strategy = { a = 1 }"), "recovery.strategy"),
    "count huge": (("{ at_step = 20 }", "{ mtbf_s = 5, count = 99999999999 }"), "faults.0.trigger.count"),
    "empty key": (('name = "t"', 'name = "t"\n"" = 1'), '""'),
}


@pytest.mark.parametrize("case", list(EXAMPLES), ids=list(EXAMPLES))
def test_reviewer_examples_are_refused(workdir: Path, case: str) -> None:
    (old, new), key = EXAMPLES[case]
    text = GOOD.replace(*TORCHFT) if "min_replica" in case else GOOD
    assert old in text
    path = workdir / "example.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        load(path)
    refused(info.value, str(path))
    assert info.value.key == key, str(info.value)


def test_sizes_are_refused_before_the_work(workdir: Path) -> None:
    """A 40 x 40 x 40 x 20 sweep and 10,000 faults used to hang; both are counted first."""
    axes = "".join(
        f'"{key}" = [{", ".join(str(start + i) for i in range(n))}]\n'
        for key, start, n in (("measure.seed", 0, 40), ("workload.steps", 100, 40), ("faults.0.duration_s", 1, 40))
    )
    axes += '"workload.pg_timeout_s" = [' + ", ".join(str(1 + i) for i in range(20)) + "]\n"
    many = GOOD.replace('"recovery.strategy" = ["failstop", "reinit"]\n', axes)
    faults = GOOD.replace("[recovery]", '[[faults]]\nkind = "kill"\ntarget = { ranks = [2] }\n' * 10_000 + "[recovery]")
    for text, key in ((many, "sweep"), (faults, "faults")):
        path = workdir / "big.toml"
        path.write_text(text)
        start = time.perf_counter()
        with pytest.raises(ConfigError) as info:
            load(path)
        assert info.value.key == key and time.perf_counter() - start < 2.0, str(info.value)


def test_rank_side_faults_need_a_real_time_signal(workdir: Path) -> None:
    kill = '[[faults]]\nkind = "kill"\ntarget = { ranks = [2] }\ntrigger = { at_step = 5 }\n'
    hang = '[[faults]]\nkind = "hang"\nduration_s = 1\ntarget = { ranks = [2] }\ntrigger = { at_step = 5 }\n'
    path = workdir / "signals.toml"
    path.write_text(GOOD.replace("[recovery]", kill * 30 + hang + "[recovery]"))  # hang at index 31
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.key == "faults.31.kind" and "real-time signal" in str(info.value)


# --- files that are not what they seem ------------------------------------------------------


@pytest.mark.timeout(20)
def test_special_files_are_refused_without_blocking(workdir: Path) -> None:
    fifo = workdir / "fifo.toml"
    if not fifo.exists():
        os.mkfifo(fifo)
    link = workdir / "link.toml"
    if not link.is_symlink():
        link.symlink_to(fifo)
    big = workdir / "huge.toml"
    big.write_text(GOOD + "#" * (1 << 20))
    cases = {fifo: "a FIFO", link: "a FIFO", workdir: "a directory", Path("/dev/null"): "a character device"}
    for path, what in cases.items():
        with pytest.raises(ConfigError, match=f"expected a regular file, got '{what}'"):
            load(path)
    with pytest.raises(ConfigError, match="at most 1048576 bytes"):
        load(big)


def test_encoding_errors_name_line_and_column(workdir: Path) -> None:
    path = workdir / "latin1.toml"
    path.write_bytes(GOOD.encode().replace(b'"t"', b'"caf\xe9"'))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.key == "line 2, column 12" and "UTF-8" in str(info.value)
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # a byte-order mark is fine
    assert load(path).name == "t"
    path.write_text(GOOD.replace("steps = 100", "steps = = 100"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.key.startswith("line 5, column") and "valid TOML" in str(info.value)


def test_a_file_name_that_is_no_name_gives_one(workdir: Path) -> None:
    path = workdir / "my scenario (copy).toml"
    path.write_text(GOOD.replace('name = "t"\n', ""))
    assert load(path).name == "my-scenario-copy"


# --- overrides -------------------------------------------------------------------------------


def test_set_sweep_replaces_or_adds_an_axis(workdir: Path) -> None:
    path = workdir / "o.toml"
    path.write_text(GOOD)
    replaced = points(load(path, [parse_override('sweep.recovery.strategy=["reinit", "restart"]')]))
    assert [p.label for p in replaced] == ["strategy=reinit", "strategy=restart"]
    added = points(load(path, [parse_override("sweep.measure.seed=[1, 2]")]))
    assert len(added) == 4 and {p.scenario.measure.seed for p in added} == {1, 2}
    cleared = points(load(path, [parse_override("sweep={}")]))
    assert [p.label for p in cleared] == ["t"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("faults.².kind=kill", "--set faults.².kind"),
        ("faults.0.duration_s=inf", "faults.0.duration_s"),
        ("faults.0x.kind=kill", "--set faults.0x.kind"),
        ("sweep.name=['a', 'b']", "sweep.name"),
        ("sweep.recovery.strategy=[]", "sweep.recovery.strategy"),
        ("sweep.recovery.strategy.x=['a']", "sweep.recovery.strategy.x"),
        ("recovery.strategy.x=1", "--set recovery.strategy.x"),
        ("name=1\nname = 'x'", "name"),
        ("workload.steps=" + "[" * 40 + "]" * 40, "--set workload.steps" + ".0" * 33),
    ],
)
def test_bad_overrides_name_their_key(workdir: Path, text: str, key: str) -> None:
    path = workdir / "o.toml"
    path.write_text(GOOD)
    with pytest.raises(ConfigError) as info:
        load(path, [parse_override(text)])
    refused(info.value, str(path))
    assert info.value.key == key, str(info.value)


# --- through the real command line ---------------------------------------------------------


def one_error_line(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (args, result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


def test_the_cli_refuses_each_in_one_line(workdir: Path) -> None:
    for i, case in enumerate(list(EXAMPLES)[::3]):
        (old, new), _ = EXAMPLES[case]
        text = GOOD.replace(*TORCHFT) if "min_replica" in case else GOOD
        path = workdir / f"cli{i}.toml"
        path.write_text(text.replace(old, new, 1))
        for command in (["show", str(path)], ["validate", str(path)]):
            assert str(path) in one_error_line(command)
    fifo = workdir / "cli-fifo.toml"
    if not fifo.exists():
        os.mkfifo(fifo)
    assert "a FIFO" in one_error_line(["run", str(fifo)])
    (workdir / "cli-ok.toml").write_text(GOOD)
    for override in ("faults.².kind=kill", "sweep.name=[1,2]", "name=../../x", "faults.0.duration_s=nan"):
        assert "Traceback" not in one_error_line(["show", str(workdir / "cli-ok.toml"), "--set", override])


def test_list_survives_a_hostile_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "latin1.toml").write_bytes(b'description = "caf\xe9"\n')
    (tmp_path / "ansi.toml").write_text('description = "\\u001b[2Jcleared"\n')
    monkeypatch.setenv("FTBENCH_SCENARIOS", str(tmp_path))
    result = CliRunner().invoke(cli, ["list"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "a FIFO" in result.output and "UTF-8" in result.output


def test_numbers_on_the_command_line_are_ascii(workdir: Path) -> None:
    # Python's int() reads full-width digits; a number option must not (click's own
    # usage error: exit status 2, the option named).
    (workdir / "cli-ok.toml").write_text(GOOD)
    for args in (["run", str(workdir / "cli-ok.toml"), "--trials", "３"], ["gate", str(workdir), "--factor", "１.５"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "not a number in ASCII digits" in result.stderr, result.output
        assert "Traceback" not in result.output


GATE_ONLY = """
name = "g"
[workload]
world_size = 2
steps = 20
"""


@pytest.mark.parametrize("where", ["[gate]\nmetric = '{m}'", "[gate]\n[[gate.slo]]\nmetric = '{m}'\nmax = 1.0"])
def test_a_gate_on_a_phase_no_strategy_has_is_refused(workdir: Path, where: str) -> None:
    path = workdir / "gate.toml"
    path.write_text(GATE_ONLY + where.format(m="phase_bogus_s"))
    with pytest.raises(ConfigError, match=r"a phase some strategy has: phase_detect_s, .*phase_restore_s"):
        load(path)
    path.write_text(GATE_ONLY + where.format(m="phase_restore_s"))
    load(path)


MEMORY = """
name = "m"
[workload]
kind = "{kind}"
world_size = 4
steps = 20
{knob} = {value}
"""


@pytest.mark.parametrize(
    ("kind", "knob", "value"),
    [("allreduce", "size_bytes", 1_000_000_000_000_000), ("ddp", "hidden", 1_000_000_000)],
)
def test_a_point_that_cannot_fit_in_memory_is_refused_with_the_estimate(
    workdir: Path, kind: str, knob: str, value: int
) -> None:
    path = workdir / "memory.toml"
    path.write_text(MEMORY.format(kind=kind, knob=knob, value=value))
    with pytest.raises(ConfigError, match=r"fit this machine: about .* per rank .* over 90% of .*\(\d") as info:
        load(path)
    assert info.value.key == f"workload.{knob}"

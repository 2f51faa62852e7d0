"""Which process group torchft's Manager is handed (``recovery.torchft.process_group``):
the decision, its refusal where the torch of the point cannot build a native group, what
a replica reads off the group it built, and how a trial's records say which path ran.

The native path itself (torch >= 2.14) runs in tests/integ/test_torchft.py only where
the harness's torch has it; here the harness's torch is whatever it is, and the torch
side of the decision is simulated where a test needs the other answer.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from bench.scenario.config import ConfigError
from bench.scenario.loader import load, parse, points
from bench.strategies.torchft.job import TorchFTJob, observed_pg
from bench.strategies.torchft.version import native_unsupported, pg_path

ROOT = Path(__file__).resolve().parents[2]
needs_torchft = pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft is not installed")


def scenario(**torchft: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "workload": {"kind": "ddp", "backend": "gloo", "world_size": 3, "steps": 10},
        "recovery": {"strategy": "torchft", "torchft": torchft},
    }


# --- the decision ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "why_not", "path"),
    [
        ("torchft", None, "torchft"),  # torchft's own group even where native could run
        ("torchft", "torch 2.13.0 cannot", "torchft"),
        ("auto", None, "native"),
        ("auto", "torch 2.13.0 cannot", "torchft"),
        ("native", None, "native"),
    ],
)
def test_the_path_follows_the_knob_and_what_torch_can_do(requested: str, why_not: str | None, path: str) -> None:
    chosen, reason = pg_path(requested, why_not)
    assert chosen == path
    assert requested in reason
    if requested == "auto" and why_not:
        assert why_not in reason  # the fallback says why


def test_native_where_it_cannot_run_is_an_error_naming_the_knob() -> None:
    with pytest.raises(RuntimeError, match=r"process_group = native: torch 2\.13\.0 cannot"):
        pg_path("native", "torch 2.13.0 cannot")


def test_the_native_group_is_gloo_only() -> None:
    why = native_unsupported("nccl")
    assert why is not None and "gloo only" in why and "nccl" in why


def test_the_harness_torch_answers_for_itself() -> None:
    import torch
    import torch.distributed as dist

    why = native_unsupported("gloo")
    if not hasattr(dist.ProcessGroup, "reconfigure"):  # torch < 2.14 (2.13: the harness's)
        assert why is not None and torch.__version__ in why and "enable_reconfigure" in why
        assert pg_path("auto", why)[0] == "torchft"  # today's behaviour, unchanged


class _Options:
    """A stand-in for torch's ReconfigureOptions (torch >= 2.14)."""


@needs_torchft
def test_a_torchft_that_does_not_drive_torchs_reconfigure_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch.distributed as dist
    import torchft.process_group as tpg

    # Simulate torch >= 2.14 whatever the harness's torch is.
    monkeypatch.setattr(dist.ProcessGroup, "reconfigure", lambda self, opts: None, raising=False)
    monkeypatch.setattr(torch._C._distributed_c10d, "ReconfigureOptions", _Options, raising=False)
    monkeypatch.setattr(tpg, "ReconfigureOptions", _Options)
    assert native_unsupported("gloo") is None  # torchft-nightly under torch 2.15
    monkeypatch.setattr(tpg, "ReconfigureOptions", type("Shim", (), {}))
    why = native_unsupported("gloo")
    assert why is not None and "does not drive torch's reconfigure" in why
    monkeypatch.delattr(tpg, "ReconfigureOptions")  # torchft 0.2.0 has none at all
    assert "does not drive" in (native_unsupported("gloo") or "")


# --- what a replica records ---------------------------------------------------------------


@needs_torchft
def test_torchfts_own_group_is_observed_as_the_torchft_path() -> None:
    import datetime

    import torch
    import torchft
    from torchft.process_group import ReconfigureOptions

    from bench.strategies.torchft.version import observe_pg

    seen = observe_pg(torchft.ProcessGroupGloo(timeout=datetime.timedelta(seconds=5)))
    assert seen["path"] == "torchft"
    assert seen["pg_class"] == "torchft.process_group.ProcessGroupGloo"
    assert seen["handle"] == "json"  # torchft's own handle: {"id": ..., "store": ...}
    native = getattr(torch._C._distributed_c10d, "ReconfigureOptions", None)
    assert seen["reconfigure_options"] == ("torch" if ReconfigureOptions is native else "shim")
    assert seen["reconfigure_options_class"].endswith("ReconfigureOptions")


@needs_torchft
def test_a_plain_torch_group_is_observed_as_the_native_path() -> None:
    import torch.distributed as dist

    from bench.strategies.torchft.version import observe_pg

    seen = observe_pg(dist.ProcessGroup(dist.HashStore(), 0, 1))
    assert seen["path"] == "native"  # torchft's Manager takes its native branch for it
    assert seen["pg_class"].endswith(".ProcessGroup")
    if not hasattr(dist.ProcessGroup, "get_reconfigure_handle"):
        assert seen["handle"].startswith("none")  # torch < 2.14: recorded, not fatal


def tf_pg(path: str, options: str, **fields: Any) -> str:
    return json.dumps(
        {
            "t": 1,
            "event": "tf_pg",
            "src": "rank",
            "path": path,
            "pg_class": "torch.distributed.distributed_c10d.ProcessGroup"
            if path == "native"
            else "torchft.process_group.ProcessGroupGloo",
            "handle": "gloo" if path == "native" else "json",
            "reconfigure_options": options,
            **fields,
        }
    )


def test_the_trial_reports_the_path_its_replicas_recorded(tmp_path: Path) -> None:
    (tmp_path / "rank0-10.jsonl").write_text(tf_pg("native", "torch") + "\n" + '{"t": 2, "event": "step_end"}\n')
    (tmp_path / "rank1-11.jsonl").write_text(tf_pg("native", "torch") + '\n{"t": 3, "event": "tf_pg", "pa')  # torn
    (tmp_path / "lighthouse-9.jsonl").write_text(tf_pg("torchft", "shim") + "\n")  # not a replica's
    assert observed_pg(tmp_path) == {
        "torchft_pg_path": "native",
        "torchft_pg_class": "torch.distributed.distributed_c10d.ProcessGroup",
        "torchft_pg_handle": "gloo",
        "torchft_reconfigure_options": "torch",
    }
    (tmp_path / "rank2-12.jsonl").write_text(tf_pg("torchft", "shim") + "\n")
    assert observed_pg(tmp_path)["torchft_pg_path"] == "native+torchft"  # never hidden


def test_no_replica_that_got_that_far_reports_no_path(tmp_path: Path) -> None:
    (tmp_path / "rank0-10.jsonl").write_text('{"t": 1, "event": "proc_start"}\n')
    assert set(observed_pg(tmp_path).values()) == {None}


# --- the knob in a scenario ----------------------------------------------------------------


def test_the_knob_defaults_to_auto_and_takes_three_values() -> None:
    assert parse(scenario(), file="x.toml").recovery.params.process_group == "auto"
    for value in ("auto", "torchft", "native"):
        assert parse(scenario(process_group=value), file="x.toml").recovery.params.process_group == value
    with pytest.raises(ConfigError, match=r"recovery\.torchft\.process_group"):
        parse(scenario(process_group="nccl2"), file="x.toml")


def test_native_on_nccl_is_refused_at_load() -> None:
    raw = scenario(process_group="native")
    raw["workload"]["backend"] = "nccl"
    with pytest.raises(ConfigError, match=r"recovery\.torchft\.process_group: expected .*gloo only"):
        parse(raw, file="x.toml")


def test_the_default_leaves_point_hashes_alone() -> None:
    plain = points(parse(scenario(), file="x.toml"))[0].point_hash
    assert points(parse(scenario(process_group="auto"), file="x.toml"))[0].point_hash == plain
    assert points(parse(scenario(process_group="native"), file="x.toml"))[0].point_hash != plain


@needs_torchft
def test_native_is_skipped_where_this_torch_cannot_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.strategies.torchft.job as job

    native = parse(scenario(process_group="native"), file="x.toml")
    monkeypatch.setattr(job, "native_unsupported", lambda backend: f"torch 2.13.0 on {backend} cannot")
    assert TorchFTJob.unavailable(native) == "recovery.torchft.process_group = native: torch 2.13.0 on gloo cannot"
    for other in ("auto", "torchft"):  # they always run: auto falls back in the replica
        assert TorchFTJob.unavailable(parse(scenario(process_group=other), file="x.toml")) is None
    monkeypatch.setattr(job, "native_unsupported", lambda backend: None)
    assert TorchFTJob.unavailable(native) is None


def test_the_named_scenario_runs_the_same_faults_under_both_torches() -> None:
    pts = points(load(ROOT / "scenarios" / "torchft-native.toml"))
    assert len(pts) == 4
    assert {p.scenario.launch.env for p in pts} == {"torch==2.13.0", "torch==2.15.0"}
    assert {p.scenario.faults[0].kind for p in pts} == {"kill", "stall"}
    for p in pts:
        s = p.scenario
        assert s.recovery.strategy == "torchft" and s.recovery.params.process_group == "auto"
        assert s.workload.world_size == 4 and s.workload.pg_timeout_s == 5 and s.workload.backend == "gloo"
        assert s.faults[0].trigger.at_step == 80

"""The command line through click's CliRunner: output, one-line errors, exit statuses."""

from __future__ import annotations

from click.testing import CliRunner

from bench.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_list_shows_named_scenarios_and_plugins() -> None:
    result = invoke("list")
    assert result.exit_code == 0
    for word in ("kill-one-rank", "stall-one-rank", "allreduce-kill", "reinit", "failstop", "stall", "ddp"):
        assert word in result.output


def test_show_prints_resolved_points() -> None:
    result = invoke("show", "kill-one-rank", "--set", "workload.world_size=3")
    assert result.exit_code == 0, result.output
    assert "strategy=failstop" in result.output and "strategy=reinit" in result.output
    assert "world_size=3" in result.output


def test_validate_good_and_bad(write_scenario) -> None:
    bad = write_scenario('[workload]\nworld_size = "four"\n', name="bad.toml")
    result = invoke("validate", "kill-one-rank", str(bad))
    assert result.exit_code == 2
    assert "ok" in result.output
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert error_lines == [f"error {bad}: workload.world_size: expected an integer >= 2 and <= 256, got 'four'"]


def test_bad_scenario_is_one_line_and_exit_2(write_scenario) -> None:
    bad = write_scenario("[measure]\ntrials = 0\n", name="bad.toml")
    for command in (["run", str(bad)], ["show", str(bad)]):
        result = invoke(*command)
        assert result.exit_code == 2
        assert result.stderr.strip().count("\n") == 0
        assert "measure.trials: expected an integer >= 1, got 0" in result.stderr
        assert "Traceback" not in result.output + result.stderr


def test_unknown_scenario_name_lists_the_catalogue() -> None:
    result = invoke("run", "no-such-scenario")
    assert result.exit_code == 2
    assert "kill-one-rank" in result.stderr


def test_bad_set_override_is_an_error() -> None:
    result = invoke("show", "kill-one-rank", "--set", "workload.world_size=1")
    assert result.exit_code == 2
    assert "workload.world_size: expected an integer >= 2" in result.stderr

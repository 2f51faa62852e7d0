# The two commands of the README (run, test) set up ./.venv first (tools/bootstrap.sh).
.PHONY: run test test-all unit lint bench

run:
	@tools/bootstrap.sh
	.venv/bin/ftbench run kill-one-rank

test:
	@tools/bootstrap.sh --test
	.venv/bin/python -m pytest

# Every test, the slow ones too (about 20 minutes on 2 cores; installs Slurm as root).
test-all:
	@tools/bootstrap.sh --test-all
	.venv/bin/python -m pytest -m ""

unit:
	@tools/bootstrap.sh --test
	.venv/bin/python -m pytest tests/unit -q

bench:
	@tools/bootstrap.sh --test
	@mkdir -p results
	.venv/bin/python -m pytest tests/bench -s -o addopts="-ra" --benchmark-enable --benchmark-json=results/benchmarks.json

lint:
	@tools/bootstrap.sh --test
	.venv/bin/ruff check bench injectors tests tools
	.venv/bin/ruff format --check bench injectors tests tools
	.venv/bin/mypy

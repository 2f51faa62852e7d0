# The two commands of the README (run, test) set up ./.venv first (tools/bootstrap.sh).
.PHONY: run test test-all unit lint bench gpu-wheels

# A first look: 2 trials a point (the figures say so) keep it under three minutes; the
# scenario's own 5 are `.venv/bin/ftbench run kill-one-rank`.
run:
	@tools/bootstrap.sh
	.venv/bin/ftbench run kill-one-rank --trials 2

# Two workers (most integration tests wait on timeouts and restarts), then the tests that
# read or change machine-wide state one at a time (marker `alone`; docs/development.md).
# Bytecode is cached (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is
# set: every pytest process and the hundreds of processes the tests start would otherwise
# compile (and pytest rewrite) the same modules again.
test:
	@tools/bootstrap.sh --test
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -n 2 --dist worksteal -m "not slow and not alone"; parallel=$$?; \
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -m "alone and not slow"; alone=$$?; \
	exit $$(( parallel || alone ))

# Every test, the slow ones too (about 25 minutes on 2 cores; installs Slurm as root, and
# builds the torch 2.15.0 environment the torch-reconfigure tests run in: ~90 s, 5.3 GB, once).
test-all:
	@tools/bootstrap.sh --test-all
	.venv/bin/python -c "from bench.procs import venvs; venvs.prepare('torch==2.15.0', progress=print)"
	.venv/bin/python -m pytest -m ""

unit:
	@tools/bootstrap.sh --test
	.venv/bin/python -m pytest tests/unit -q

# ROUNDS=N: paired rounds of the harness-cost benchmark per workload (9); MINUTES=M: keep adding
# rounds, up to M minutes per workload, until the wall-time ratio is resolved to 2 points.
bench:
	@tools/bootstrap.sh --test
	@mkdir -p results
	$(if $(ROUNDS),FTBENCH_COST_ROUNDS=$(ROUNDS)) $(if $(MINUTES),FTBENCH_COST_MINUTES=$(MINUTES)) .venv/bin/python -m pytest tests/bench -s -o addopts="-ra" --benchmark-enable --benchmark-json=results/benchmarks.json

lint:
	@tools/bootstrap.sh --test
	.venv/bin/ruff check bench injectors tests tools examples
	.venv/bin/ruff format --check bench injectors tests tools examples
	.venv/bin/mypy

# The wheels the one-GPU run carries to a GPU machine without network (tools/gpu-wheels.txt,
# for CPython 3.12 on manylinux x86-64) into .whl/, checked against the GPU image
# (docs/development.md, "The one-GPU run").
gpu-wheels:
	@tools/bootstrap.sh
	.venv/bin/python -m bench.onegpu wheels

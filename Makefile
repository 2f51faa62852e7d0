# The two commands of the README. Both set up ./.venv first (tools/bootstrap.sh).
.PHONY: run test

run:
	@tools/bootstrap.sh
	.venv/bin/ftbench run kill-one-rank

test:
	@tools/bootstrap.sh --test
	.venv/bin/python -m pytest

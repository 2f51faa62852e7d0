#!/usr/bin/env bash
# torch 2.15's NCCL backends on real GPUs: the points of scenarios/nccl-backends.toml
# (the rewritten backend and the legacy one, a kill and a stall, three stacks), three
# trials each, in under 10 minutes on a machine with 2 or more GPUs; prints the table.
#
#   tools/gpu-check.sh             run them (exit 3 where fewer than 2 GPUs are visible)
#   tools/gpu-check.sh --dry-run   validate, list the points and say whether this machine can run them
#
# FTBENCH_PYTHON picks the harness's interpreter (default: .venv/bin/python, set up by
# tools/bootstrap.sh first).
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: tools/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac
if [ -z "${FTBENCH_PYTHON:-}" ]; then
  tools/bootstrap.sh
  FTBENCH_PYTHON=.venv/bin/python
fi
ftbench() { "$FTBENCH_PYTHON" -m bench "$@"; }

ftbench validate nccl-backends
ftbench show nccl-backends
gpus=$("$FTBENCH_PYTHON" -W ignore::FutureWarning -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$gpus" -lt 2 ]; then
  echo "gpu-check: $gpus GPU(s) visible here; these points need 2 (one per rank: NCCL refuses two ranks of a communicator on one GPU)"
  [ "$DRY" = 1 ] && exit 0 || exit 3
fi
if [ "$DRY" = 1 ]; then
  echo "gpu-check: $gpus GPUs visible: would run 'ftbench run nccl-backends --trials 3' (about 36 trials, under 10 minutes)"
  exit 0
fi
timeout 600 "$FTBENCH_PYTHON" -m bench run nccl-backends --trials 3

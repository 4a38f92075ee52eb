# The commands a person needs. `make test` and `make demo` work on a fresh
# machine: they install the environment and build the extension first.
#
#   make install   environment at .venv/ (a link to a cached environment keyed by
#                  the requirements) and torch_accel._C built in place
#   make test      accelrt's unit tests, then the pytest suite (host runtime here)
#   make demo      the demo on whatever runtime is present
#   make gpu-test  on a GPU machine: build offline against the preinstalled torch,
#                  run the suite on the CUDA runtime, write test/reports/gpu-test.md
#   make bench     benchmarks/ (accel against its target, ratios)
#   make lint      C++ formatting (.clang-format) and Python syntax

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REQUIREMENTS := requirements.txt requirements-dev.txt
CACHE_ROOT ?= $(HOME)/.cache/torch_accel
PYTEST_ARGS ?=
NATIVE_SOURCES := setup.py $(shell find csrc third_party/accelrt/src third_party/accelrt/include -name '*.cpp' -o -name '*.h' 2>/dev/null)

.PHONY: install build test test-accelrt test-python demo gpu-test bench lint clean

install: build

# The environment lives in a cache keyed by Python version and requirements, so
# a new checkout reuses it; .venv links to it. flock keeps concurrent installs
# from building the same environment twice.
$(VENV)/.complete: $(REQUIREMENTS)
	@key=$$(cat $(REQUIREMENTS) | sha256sum | cut -c1-16); \
	pyver=$$($(PYTHON) -c 'import sys; print("py%d%d" % sys.version_info[:2])'); \
	env="$(CACHE_ROOT)/venv-$$pyver-$$key"; \
	mkdir -p "$(CACHE_ROOT)"; \
	( flock 9; \
	  if [ ! -f "$$env/.complete" ]; then \
	    echo "creating $$env"; rm -rf "$$env"; \
	    $(PYTHON) -m venv "$$env"; \
	    "$$env/bin/python" -m pip install -q --upgrade pip; \
	    "$$env/bin/python" -m pip install -q -r requirements-dev.txt; \
	    touch "$$env/.complete"; \
	  fi ) 9>"$$env.lock"; \
	if [ "$$(readlink $(VENV) || true)" != "$$env" ]; then rm -rf $(VENV); ln -s "$$env" $(VENV); fi; \
	touch "$$env/.complete"

build: build/.ext-built

build/.ext-built: $(NATIVE_SOURCES) $(VENV)/.complete
	$(PY) setup.py -q build_ext --inplace
	@mkdir -p build && touch $@

test: install test-accelrt test-python

test-accelrt:
	$(MAKE) -C third_party/accelrt test

test-python: install
	$(PY) -m pytest test $(PYTEST_ARGS)

demo: install
	$(PY) -m torch_accel.demo

bench: install
	$(PY) benchmarks/run.py

lint: install
	find csrc third_party/accelrt -name '*.cpp' -o -name '*.h' | xargs clang-format --dry-run --Werror
	$(PY) -m compileall -q torch_accel test benchmarks

# GPU machine: no network, torch preinstalled for the plain python3.
# The GPU image's default compiler (CXX=/opt/gcc/bin/g++) links libstdc++
# statically; _C then carries its own iostream facets, which clash with the
# libstdc++ torch loaded and crash the first error message that formats a
# number. The distribution's g++ links it dynamically, as torch does.
GPU_PYTHON ?= python3
GPU_CXX ?= $(shell command -v /usr/bin/g++ || echo g++)
gpu-test:
	CXX=$(GPU_CXX) TORCH_ACCEL_BUILD_CUDA=1 $(GPU_PYTHON) setup.py -q build_ext --inplace
	@ldd torch_accel/_C*.so | grep -q 'libstdc++' || { echo "torch_accel/_C links libstdc++ statically; set GPU_CXX to a g++ that links it dynamically"; exit 1; }
	$(MAKE) -C third_party/accelrt test
	TORCH_ACCEL_RUNTIME=cuda $(GPU_PYTHON) test/gpu_report.py --output test/reports/gpu-test.md $(PYTEST_ARGS)

clean:
	rm -rf build torch_accel/_C*.so third_party/accelrt/build

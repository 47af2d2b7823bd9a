#!/usr/bin/env bash
# GPU verification: a 30-second smoke step, the GPU timers compared, the suite on CUDA, A/B gates on the
# device clock, then a Markdown report of every check (pass/fail) and the time per step (device clock,
# kernel time, host dispatch, TFLOP/s against the measured peak).
#
#   bash scripts/gpu_suite.sh                                   # online: .venv via scripts/setup.sh
#   PERFSUITE_PYTHON=python3 bash scripts/gpu_suite.sh          # offline: the torch python3 has
#   PERFSUITE_PYTHON=python3 PERFSUITE_GPU_OUT=$OUT bash scripts/gpu_suite.sh   # files to bring back
#
# Offline mode (PERFSUITE_PYTHON set): no venv, nothing from the network (scripts/setup_offline.sh);
# the installed torch, triton and transformers are used as they are.
# Steps: (0) preflight (`perfsuite verify --preflight`, at most 180 s): each GPU finding the CPU
# cannot prove (Kineto records, a failed capture released, backward capture, unrolled graphs,
# FP8/varlen/flex decode on grouped-query cases, NVML counters): RESULTS/preflight.json; a failure
# marks the run failed but the later steps still run. (1) smoke (`perfsuite verify --smoke`): CUDA visible, one call per pinned SDPA backend, one
# profiled naive forward whose device lane shows the score copy; a failure stops here, so a broken
# machine costs seconds. Then the stages of PERFSUITE_GPU_STAGES (default timers,suite,gates):
# (2) timers: `python -m validation.gpu_timers` (every GPU timer on the post's case forward, a decode
# step and a backward, 200 samples each: RESULTS/gpu_timers.md and .json; PERFSUITE_GPU_TIMERS_LIMIT_S,
# default 420). (3) suite: PERFSUITE_GPU_SHAPES (default: the post's case, 8x16x1024x64) in bf16,
# every variant in every mode, on the cuda_event timer (graph replay where capture works, blocked
# events otherwise; L2 flushed outside the interval; sampled until the median is within 1% or
# --benchmark-max-time=1 per benchmark), within PERFSUITE_GPU_BUDGET_S seconds (default 420; running
# past it is a failure). (4) gates: `python -m validation.calibrate_gate` on the post's case,
# naive_inplace and sdpa forward, PERFSUITE_GPU_GATES repetitions (default 10) of A/A, the lost
# masked_fill_ ("real change") and the output round trip through float32 ("output round trip"):
# RESULTS/gates.json and gates.txt; PERFSUITE_GPU_GATES_LIMIT_S (default 1200).
# (5) the report: RESULTS/verification.md (PERFSUITE_GPU_RESULTS, default perfsuite-results/gpu).
# TEARDOWN_CUPTI=1 is exported (Kineto detaches CUPTI after each profiler session).
# PERFSUITE_GPU_OUT: a folder that receives at most 8 files (report, junit, table, run.json, trace
# summary, a few traces, the validation tarball, the log), for a machine whose files come back by a
# size-limited copy.
# Exit status: 0 every check passed and every stage ran; 1 a check failed, a stage failed or ran too long.
# Without a CUDA device it still runs end to end and writes a report that says "NO CUDA DEVICE"
# (exit 0; PERFSUITE_REQUIRE_CUDA=1 makes it exit 1). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${PERFSUITE_GPU_RESULTS:-perfsuite-results/gpu}
budget=${PERFSUITE_GPU_BUDGET_S:-420}
stages=",${PERFSUITE_GPU_STAGES:-timers,suite,gates},"
gates=${PERFSUITE_GPU_GATES:-10}
timers_limit=${PERFSUITE_GPU_TIMERS_LIMIT_S:-420}
gates_limit=${PERFSUITE_GPU_GATES_LIMIT_S:-1200}
export TEARDOWN_CUPTI=${TEARDOWN_CUPTI:-1}
shapes=${PERFSUITE_GPU_SHAPES:-8x16x1024x64}
collect=${PERFSUITE_GPU_OUT:-}
mkdir -p "$out"
exec > >(tee "$out/gpu_suite.log") 2>&1
if [ -n "${PERFSUITE_PYTHON:-}" ]; then
    bash scripts/setup_offline.sh || exit 1
    py=$PERFSUITE_PYTHON
else
    bash scripts/setup.sh || exit 1
    py=.venv/bin/python
fi
perfsuite() { "$py" -m perfsuite.cli.main "$@"; }
require=()
[ "${PERFSUITE_REQUIRE_CUDA:-0}" = 1 ] && require=(--require-cuda)

# Bring back what fits (at most 8 files): the report first, the log last.
collect_files() {
    [ -n "$collect" ] || return 0
    mkdir -p "$collect"
    for f in verification.md junit.xml table.md run.json trace-summary.txt; do
        [ -f "$out/$f" ] && cp "$out/$f" "$collect/"
    done
    # the timer comparison and the gates, in one file
    (cd "$out" && ls preflight.json gpu_timers.md gpu_timers.json gates.json gates.txt 2>/dev/null \
        | tar -czf "$collect/validation.tar.gz" -T - 2>/dev/null) || true
    if [ -d "$out/traces" ]; then  # a few forward traces: naive, naive_inplace and the pinned backends
        find "$out/traces" -name '*.json.gz' \( -name '*naive*' -o -name '*sdpa_*' -o -name '*flex_compiled*' \) \
            -size -2M | head -n 12 | tar -czf "$collect/traces.tar.gz" -T - 2>/dev/null || true
    fi
    sleep 0.2; cp "$out/gpu_suite.log" "$collect/"
}
summary() {
    echo "perfsuite gpu_suite: summary"
    grep -m1 -E '^\*\*Result' "$out/verification.md" 2>/dev/null | tr -d '*'
    grep -m1 -E '^\*\*Smoke' "$out/verification.md" 2>/dev/null | tr -d '*'
    grep -m1 -E '^[0-9]+ passed, ' "$out/verification.md" 2>/dev/null
    [ -n "$collect" ] && echo "files: $(cd "$collect" 2>/dev/null && ls | tr '\n' ' ')"
}

"$py" - <<'PY'
import torch
print(f"perfsuite gpu_suite: torch {torch.__version__}, torch.version.cuda={torch.version.cuda}, "
      f"torch.version.hip={getattr(torch.version, 'hip', None)}, cuda available: {torch.cuda.is_available()}")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
command -v rocm-smi >/dev/null && rocm-smi --showdriverversion
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    perfsuite verify --results "$out" ${require[@]+"${require[@]}"}
    status=$?
    collect_files; summary
    exit "$status"
fi
rm -f "$out/smoke.md" "$out/preflight.json"
suite_exit=0
stage_failed=""
post_case=b8h16s1024d64-bf16-causal-cuda
# (0) the preflight: each finding the CPU cannot prove, checked on the device in about a minute
# (RESULTS/preflight.json); a failure is reported and the later stages still run
echo "perfsuite gpu_suite: preflight (perfsuite verify --preflight)"
timeout --kill-after=10 180 "$py" -m perfsuite.cli.main verify --preflight --results "$out" || stage_failed+=" preflight"
if timeout --kill-after=10 120 "$py" -m perfsuite.cli.main verify --smoke --results "$out"; then
    if [[ $stages == *,timers,* ]]; then
        echo "perfsuite gpu_suite: GPU timers compared (validation.gpu_timers)"
        timeout --kill-after=10 "$timers_limit" "$py" -m validation.gpu_timers \
            --out "$out/gpu_timers.md" --json "$out/gpu_timers.json" || stage_failed+=" timers"
    fi
    if [[ $stages == *,suite,* ]]; then
        timeout --kill-after=20 "$budget" "$py" -m pytest -c benchmarks.ini -p no:cacheprovider \
            --perfsuite-devices cuda --perfsuite-shapes "$shapes" --perfsuite-dtypes bf16 \
            --perfsuite-timer cuda_event --perfsuite-l2-flush on --perfsuite-cuda-graphs on \
            --perfsuite-results "$out" --junitxml "$out/junit.xml" \
            --benchmark-max-time=1.0 --benchmark-min-rounds=10 "$@" || suite_exit=$?
        # Kernels and copies per forward, read back from the traces (for the log and the summary file).
        perfsuite trace "$out/traces" --annotation perfsuite::forward --first --top 5 > "$out/trace-summary.txt" 2>&1 || true
    fi
    if [[ $stages == *,gates,* ]]; then
        echo "perfsuite gpu_suite: A/B gates on the device clock, $gates of each scenario"
        timeout --kill-after=20 "$gates_limit" "$py" -m validation.calibrate_gate \
            --cases "$post_case" --variants naive_inplace,sdpa --modes forward --reps "$gates" \
            --scenarios "A/A,real change,output round trip" --out "$out/gates.json" \
            > "$out/gates.txt" 2>&1 || stage_failed+=" gates"
        tail -n 40 "$out/gates.txt"
    fi
else
    echo "perfsuite gpu_suite: the smoke step failed; the suite is not run (see the report)"
    [ -f "$out/smoke.md" ] || printf '## Smoke step\n\n**Smoke: FAIL: it did not finish (timeout or crash)**\n' > "$out/smoke.md"
    suite_exit=1
fi
perfsuite verify --results "$out" --suite-exit "$suite_exit" --budget-s "$budget" ${require[@]+"${require[@]}"}
status=$?
if [ -n "$stage_failed" ]; then
    echo "perfsuite gpu_suite: stage(s) failed or ran past their limit:$stage_failed (see gpu_suite.log)"
    status=1
fi
collect_files; summary
exit "$status"

#!/usr/bin/env bash
# One GPU session's checks, sized for a machine lent for minutes and reached only by a copy of the tree:
# (1) scripts/gpu_suite.sh offline (smoke, the suite on CUDA, the verification report);
# (2) a short planted history timed on the GPU (validation.change_points make-history: separate
#     `perfsuite run`s of each commit, or with PERFSUITE_HISTORY_GATE a `perfsuite ab` gate of each
#     commit against its parent, recorded in the throwaway repository's SQLite store) and its
#     analysis (`history` against the planted commits, `perfsuite history list/show`).
# Usage: PERFSUITE_PYTHON=python3 bash validation/gpu_history.sh OUT
# OUT receives at most four files: summary.txt, suite.tar.gz (the suite's files), history.txt, history.sqlite.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: validation/gpu_history.sh OUT}
py=$(command -v "${PERFSUITE_PYTHON:?set PERFSUITE_PYTHON to the interpreter that has torch}") || exit 1
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
commits=${PERFSUITE_HISTORY_COMMITS:-12}
planted=${PERFSUITE_HISTORY_PLANTED:-4:extra_copy,7:lost_in_place,10:slower_backward}
case_id=${PERFSUITE_HISTORY_CASE:-b8h16s1024d64-bf16-causal-cuda}
# perfsuite ab options: when set, each commit is gated against its parent instead of timed alone
gate=${PERFSUITE_HISTORY_GATE:-}
mkdir -p "$out"
suite=$(mktemp -d)
start=$SECONDS
PERFSUITE_GPU_OUT=$suite PERFSUITE_REQUIRE_CUDA=${PERFSUITE_REQUIRE_CUDA:-1} bash scripts/gpu_suite.sh
suite_exit=$?
tar -czf "$out/suite.tar.gz" -C "$suite" . 2>/dev/null
echo "gpu_history: suite exit $suite_exit after $((SECONDS - start)) s" | tee "$out/summary.txt"
tail -n 6 "$suite/gpu_suite.log" >> "$out/summary.txt" 2>/dev/null

repo=$(mktemp -d)/history
start=$SECONDS
{
    echo "## make-history: $commits commits, planted $planted, case $case_id"
    "$py" -m validation.change_points make-history --repo "$repo" --commits "$commits" \
        --planted "$planted" --case "$case_id" ${gate:+--gate $gate} 2>&1
    made=$?
    echo "make-history exit $made after $((SECONDS - start)) s"
    shas=$(git -C "$repo" log --format='%H %s' | awk '/: (extra_copy|lost_in_place|slower_backward)$/ {print $1}' | tac | paste -sd,)
    echo "## analysis (planted $shas)"
    "$py" -m validation.change_points history --store "$repo/.perfsuite/history.sqlite" --planted "$shas" 2>&1
    echo "## perfsuite history list"
    (cd "$repo" && "$py" -m perfsuite history list 2>&1)
    for mode in forward backward; do
        series=$(cd "$repo" && "$py" -m perfsuite history list --mode "$mode" --measure time_s --json \
            | "$py" -c 'import json, sys; print(next((s["id"] for s in json.load(sys.stdin)), ""))')
        echo "## perfsuite history show $series ($mode)"
        [ -n "$series" ] && (cd "$repo" && "$py" -m perfsuite history show "$series" 2>&1)
    done
} > "$out/history.txt" 2>&1
cp "$repo/.perfsuite/history.sqlite" "$out/" 2>/dev/null
echo "gpu_history: history done after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit "$suite_exit"

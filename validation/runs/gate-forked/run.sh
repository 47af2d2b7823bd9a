#!/bin/bash
# issue 49: forked workers on a quiet machine; run alone
cd /work/calib
C="--cases b2h8s256d64-fp32-causal-cpu"
G=".venv/bin/python -m validation.calibrate_gate"
O=/work/calibout
step() { echo "== $(date +%T) start $1"; }
step lost20;  $G --scenarios "real change" --reps 20 --variants naive_inplace $C --out $O/lost20.json > $O/lost20.log 2>&1
step inj3;    $G --scenarios "3% injected" --slow-variant naive_inplace,sdpa --reps 20 --variants naive_inplace,sdpa $C --out $O/inj3.json > $O/inj3.log 2>&1
step inj5;    $G --scenarios "5% injected" --slow-variant naive_inplace,sdpa --reps 20 --variants naive_inplace,sdpa $C --out $O/inj5.json > $O/inj5.log 2>&1
step py;      .venv/bin/python -m validation.python_overhead --gates 3 > $O/py.log 2>&1
step aa;      $G --scenarios "A/A" --reps 8 --case-set smoke --out $O/aa.json > $O/aa.log 2>&1
step busy1lost; $G --scenarios "real change" --busy 1 --reps 20 --variants naive_inplace $C --out $O/b1lost.json > $O/b1lost.log 2>&1
step busy1aa; $G --scenarios "A/A" --busy 1 --reps 9 --case-set smoke --out $O/b1aa.json > $O/b1aa.log 2>&1
step busy2x8; $G --scenarios "score copies x8" --busy 2 --reps 10 --variants naive_inplace $C --out $O/b2x8.json > $O/b2x8.log 2>&1
step busy2aa; $G --scenarios "A/A" --busy 2 --reps 3 --case-set smoke --out $O/b2aa.json > $O/b2aa.log 2>&1
echo "== $(date +%T) done"

#!/bin/bash
cd /work/calib
until grep -q "done" /work/calibout/run.log; do sleep 5; done
G=".venv/bin/python -m validation.calibrate_gate"
O=/work/calibout
echo "== $(date +%T) start same6"
.venv/bin/python -m validation.python_overhead --gates 6 --heads same --ab-option=--require-timing --ab-option=--min-effect=0.03 > $O/same6.log 2>&1
echo "== $(date +%T) start aa2"
$G --scenarios "A/A" --reps 8 --case-set smoke --out $O/aa2.json > $O/aa2.log 2>&1
echo "== $(date +%T) done"

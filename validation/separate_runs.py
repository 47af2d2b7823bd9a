"""Identical code, separate runs: what does a comparison of two saved runs say, and why?

Compares every pair of the given saved runs in the order given (pytest-benchmark JSON of the same
code, e.g. the ``unloaded.json`` of several ``validation/contention_check.py`` runs) with
``perfsuite.gate.compare`` and counts the verdicts: every ``slower`` or ``faster`` is a false
alarm. Also counts what the comparison would have said without the speed reference
(``perfsuite.measure.speed_reference``), so its effect shows apart.

    .venv/bin/python -m validation.separate_runs RUN.json RUN.json [RUN.json ...]
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter

from perfsuite.gate.compare import compare_runs, load_benchmark_file
from perfsuite.gate.stats import CONTENDED_VERDICT, SEPARATE_RUNS_MIN_EFFECT, GateSettings, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="saved runs of identical code, oldest first")
    args = parser.parse_args()
    settings = GateSettings(min_effect=SEPARATE_RUNS_MIN_EFFECT)
    runs = {path: load_benchmark_file(path) for path in args.runs}
    total, without = Counter(), Counter()
    print(
        "| base | head | slower | faster | no change | inconclusive | contended (speed changed) | "
        "slower / faster without the speed reference |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for base, head in itertools.combinations(args.runs, 2):
        found = compare_runs(runs[base], runs[head], settings)
        counts = Counter(c.verdict for c in found)
        speed = [c for c in found if c.speed_changed]
        raw = Counter(verdict(c.estimate, settings) for c in speed if c.estimate)
        total.update(counts)
        without.update(counts + Counter({"slower": raw["slower"], "faster": raw["faster"]}))
        print(
            f"| {base} | {head} | {counts['slower']} | {counts['faster']} | {counts['no change']} | "
            f"{counts['inconclusive']} | {counts[CONTENDED_VERDICT]} ({len(speed)}) | "
            f"{counts['slower'] + raw['slower']} / {counts['faster'] + raw['faster']} |"
        )
    print(
        f"\nAll pairs: {dict(total)}; without the speed reference: slower {without['slower']}, "
        f"faster {without['faster']}"
    )


if __name__ == "__main__":
    main()

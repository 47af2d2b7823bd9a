"""Does the timed run flag what contention did to it? A run without and a run with busy processes.

1. the timed suite (``pytest -c benchmarks.ini``, under ``perfsuite.measure.conditions``) with no
   busy process of ours beside it ("unloaded": other users of a shared machine still run);
2. the same with ``--busy`` busy processes beside it (default: one per CPU; ``validation/contend.py``);
3. per benchmark: did its median move by more than ``--moved`` (default 10%), and is it flagged
   ``contended`` in the loaded run? Every moved benchmark should be flagged;
4. ``perfsuite compare unloaded loaded`` (identical code): how many "slower" verdicts (should be 0).

Writes ``contention-check.md`` / ``.json`` under ``--out`` with the load averages.

    .venv/bin/python -m validation.contention_check --out docs/contention
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from perfsuite.measure.conditions import required_env

from validation.contend import busy_processes, load_average

ROOT = Path(__file__).resolve().parents[1]


def timed_run(name: str, busy: int, args, env) -> tuple[Path, str]:
    out = Path(args.out)
    json_path = out / f"{name}.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        "benchmarks.ini",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--perfsuite-case-set={args.case_set}",
        f"--perfsuite-variants={args.variants}",
        f"--perfsuite-results={out / (name + '-results')}",
        f"--benchmark-storage={out / 'storage'}",
        f"--benchmark-json={json_path}",
        "-k",
        "test_benchmark",
    ]
    with busy_processes(busy):
        before = load_average()
        subprocess.run(command, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
        return json_path, f"{before} -> {load_average()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument(
        "--variants", default="naive,naive_inplace,sdpa,sdpa_math,sdpa_flash,flex_eager"
    )
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--moved", type=float, default=0.10)
    parser.add_argument("--out", default="perfsuite-results/contention")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **required_env())
    unloaded, unloaded_load = timed_run("unloaded", 0, args, env)
    loaded, loaded_load = timed_run("loaded", args.busy, args, env)
    read = lambda p: {
        f"{b['extra_info']['variant']}/{b['extra_info']['case']}/{b['extra_info']['mode']}": b
        for b in json.loads(p.read_text())["benchmarks"]
    }
    a, b = read(unloaded), read(loaded)
    rows, moved, moved_flagged, flagged_a = [], 0, 0, 0
    for key in a:
        if key not in b:
            continue
        ma, mb = a[key]["stats"]["median"], b[key]["stats"]["median"]
        ca, cb = a[key]["extra_info"]["contention"], b[key]["extra_info"]["contention"]
        did_move = abs(mb / ma - 1) > args.moved
        moved += did_move
        moved_flagged += did_move and cb["contended"]
        flagged_a += ca["contended"]
        rows.append(
            f"| `{key}` | {ma * 1e3:.3f} | {ca['contended']} ({ca['wait_fraction']:.2f}) | {mb * 1e3:.3f} | "
            f"{cb['contended']} ({cb['wait_fraction']:.2f}) | {mb / ma:.2f} |"
        )
    gate = subprocess.run(
        [str(Path(sys.executable).parent / "perfsuite"), "compare", str(unloaded), str(loaded)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    verdicts = {
        v: gate.stdout.count(f"| {v}")
        for v in ("**slower**", "faster", "no change", "inconclusive: contended")
    }
    verdicts["inconclusive (not contended)"] = gate.stdout.count(
        "| inconclusive |"
    ) + gate.stdout.count("| inconclusive (")
    lines = [
        f"Unloaded run: load average {unloaded_load}; loaded run ({args.busy} busy processes): {loaded_load}.",
        "",
        f"Benchmarks whose median moved by more than {args.moved:.0%}: {moved}; of them flagged contended in the "
        f"loaded run: {moved_flagged}. Flagged contended in the unloaded run: {flagged_a} of {len(rows)}.",
        "",
        "Gate `perfsuite compare unloaded loaded` (identical code): "
        + ", ".join(f"{n} {v.strip('*')}" for v, n in verdicts.items())
        + f" (exit code {gate.returncode}).",
        "",
        "| benchmark | unloaded ms | contended (wait fraction) | loaded ms | contended (wait fraction) | loaded / unloaded |",
        "| --- | --- | --- | --- | --- | --- |",
    ] + rows
    (Path(args.out) / "contention-check.md").write_text("\n".join(lines) + "\n")
    (Path(args.out) / "gate.md").write_text(gate.stdout)
    (Path(args.out) / "contention-check.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "unloaded_load": unloaded_load,
                "loaded_load": loaded_load,
                "moved": moved,
                "moved_flagged": moved_flagged,
                "verdicts": verdicts,
            },
            indent=1,
        )
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Scale check of the dashboard: a history store of SERIES series x POINTS commits, written as a site and opened
in Debian's headless chromium. Prints the site's size and the time from navigation to an interactive page (data
parsed, findings and the first charts drawn), then the time a filter takes to apply.

    .venv/bin/python validation/dashboard_scale.py [--series 200] [--points 1000] [--rounds 10]

Targets (issue 26): interactive in under 2 s, site under 10 MB. The store's data is made (seeded log-normal
rounds with a 30% step in every tenth series), so the figures measure the dashboard, not this machine's
benchmarks; the browser's times depend on the machine and are what this command prints on it.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.dashboard.site import write_site
from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed, open_store

VARIANTS = ("naive", "naive_inplace", "sdpa", "sdpa_math", "sdpa_flash", "compiled", "flex", "mha")
MODES = ("forward", "backward", "forward_backward")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def benchmarks(series: int) -> list[tuple[str, str, str]]:
    """``series`` (variant, case id, mode) triples over the variants, modes and as many cases as needed."""
    found, case = [], 0
    while len(found) < series:
        for variant in VARIANTS:
            for mode in MODES:
                found.append((variant, f"b2h8s{64 * (case + 1)}d64-fp32-causal-cpu", mode))
        case += 1
    return found[:series]


def build(url: str, series: int, points: int, rounds: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    testbed = Testbed(
        device_names={"cpu": "x86_64"}, cpu_model="Scale CPU", memory_bytes=2**34, num_threads=2
    )
    chosen = benchmarks(series)
    with open_store(url) as store:
        for i in range(points):
            sha = f"{rng.getrandbits(160):040x}"
            records = []
            for k, (variant, case, mode) in enumerate(chosen):
                base = 1e-4 * (1 + k % 7) * (1.3 if k % 10 == 0 and i >= points // 2 else 1.0)
                values = tuple(base * rng.lognormvariate(0, 0.03) for _ in range(rounds))
                records.append(
                    BenchmarkRecord(
                        name=f"{variant}/{case}/{mode}",
                        variant=variant,
                        case_id=case,
                        mode=mode,
                        device="cpu",
                        rounds_s=values,
                        median_s=sorted(values)[rounds // 2],
                        contended=rng.random() < 0.01,
                    )
                )
            store.record(
                RunRecord(
                    uid=f"scale-{i}",
                    source="import",
                    commit=Commit(
                        sha=sha,
                        branch="main",
                        commit_time=1.7e9 + 600 * i,
                        position=i + 1,
                        subject=f"commit {i + 1}",
                    ),
                    testbed=testbed,
                    software=Software({"python": "3.11", "torch": "2.13.0"}),
                    benchmarks=tuple(records),
                    recorded_at=1.7e9 + 600 * i,
                )
            )


def open_in_chromium(index: Path) -> tuple[float, float, list[str]]:
    """(seconds to interactive, seconds for a filter, problems: console errors and network requests)."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on(
            "request", lambda r: problems.append(r.url) if not r.url.startswith("file:") else None
        )
        start = time.perf_counter()
        page.goto(index.resolve().as_uri())
        page.wait_for_selector("body[data-ready]", timeout=60_000)
        page.locator("#series").scroll_into_view_if_needed()
        page.wait_for_function("Object.keys(window.perfsuiteCharts).length > 0", timeout=60_000)
        interactive = time.perf_counter() - start
        start = time.perf_counter()
        page.select_option("#filter-variant", "naive")
        page.wait_for_function(
            "document.querySelectorAll('article.series').length > 0 && "
            "[...document.querySelectorAll('article.series h3')].every(h => h.textContent.startsWith('naive \\u00b7'))"
        )
        filtered = time.perf_counter() - start
        browser.close()
    return interactive, filtered, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--keep", help="write the store and site into this folder instead of a temporary one"
    )
    args = parser.parse_args(argv)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="perfsuite-dashboard-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'history.sqlite'}"
    start = time.perf_counter()
    build(url, args.series, args.points, args.rounds)
    built = time.perf_counter() - start
    start = time.perf_counter()
    with open_store(url, create=False) as store:
        dashboard = dashboard_from_store(store)
    index = write_site(dashboard, folder / "site")
    written = time.perf_counter() - start
    size_mb = sum(p.stat().st_size for p in index.parent.iterdir()) / 1e6
    interactive, filtered, problems = open_in_chromium(index)
    print(
        f"{len(dashboard.series)} series x {args.points} points ({args.rounds} rounds each): store built in "
        f"{built:.1f} s, site written in {written:.1f} s, {size_mb:.2f} MB; "
        f"interactive in {interactive:.2f} s in headless chromium, a filter applied in {filtered:.2f} s; "
        f"change points found: {sum(len(s.change_points) for s in dashboard.series)}"
    )
    if problems:
        print("problems: " + "; ".join(problems), file=sys.stderr)
    ok = interactive < 2.0 and size_mb < 10 and not problems
    print(
        "targets (interactive < 2 s, site < 10 MB, no console error or request): "
        + ("met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

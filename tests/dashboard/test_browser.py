"""The dashboard in a real browser: Debian's headless chromium driven by Playwright, on a site written by
``perfsuite dashboard`` from a store built in the test. Every test fails on a console error, an uncaught
exception or a network request (anything but file://). PERFSUITE_SCREENSHOTS=DIR keeps the screenshots
(docs/dashboard/ holds the committed ones)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from perfsuite.cli.main import main
from perfsuite.dashboard.model import ChangePoint, Commit, Dashboard, Series, point_from_rounds
from perfsuite.dashboard.model import Testbed as SiteTestbed
from perfsuite.dashboard.site import write_site

CAUSE = "+1 copy cpu aten::clone [2x8x256x256]; allocated +4.0 MiB per step"

pytestmark = pytest.mark.slow


def shoot(page, name: str, tmp_path: Path, locator: str | None = None) -> Path:
    folder = Path(os.environ.get("PERFSUITE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    (page.locator(locator) if locator else page).screenshot(path=str(path))
    assert path.stat().st_size > 10_000  # a page with content, not a blank one
    return path


def open_site(page, index: Path) -> None:
    page.goto(index.resolve().as_uri())
    page.wait_for_selector("body[data-ready]", timeout=20_000)


def test_site_from_a_store_charts_filters_and_links(history_store, tmp_path, page):
    url, shas = history_store
    out = tmp_path / "site"
    assert (
        main(
            [
                "dashboard",
                "--store",
                url,
                "--out",
                str(out),
                "--repo-url",
                "https://github.com/org/repo",
            ]
        )
        == 0
    )
    open_site(page, out / "index.html")
    # the first screen names the planted regression: its commits, size and structural cause
    row = page.locator("#changes tbody tr")
    assert row.count() == 1
    text = row.first.inner_text()
    assert "naive \u00b7 b2h8s256d64" in text and re.search(
        r"\+(39|40)\.\d% \[\+\d+\.\d%, \+\d+\.\d%\]", text
    ), text
    assert shas[4][:8] in text and shas[3][:8] in text and "slower" in text
    assert "+1 copy cpu aten::clone [2x8x256x256]" in text and "allocated +4.0 MiB per step" in text
    assert row.first.locator(f"a[href='https://github.com/org/repo/commit/{shas[4]}']").count() == 1
    shoot(page, "findings", tmp_path)
    cards = page.locator("article.series")
    assert cards.count() == 3  # naive, naive_inplace, sdpa_math (forward, wall time)
    naive = page.locator("article.series", has_text="naive \u00b7 b2h8s256d64")
    naive.first.scroll_into_view_if_needed()
    series_id = naive.first.get_attribute("data-series")
    page.wait_for_function(f"window.perfsuiteCharts[{series_id!r}] !== undefined")
    assert page.evaluate(f"window.perfsuiteCharts[{series_id!r}].data[0].length") == len(shas)
    assert naive.first.get_attribute("data-points") == str(len(shas))
    assert "torch 2.12.0 -> 2.13.0" in naive.first.inner_text()  # the epoch boundary
    # hover: the commit, date, value and rounds of the point under the cursor
    box = naive.first.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    hover = naive.first.locator(".hover").inner_text()
    assert shas[-1][:8] in hover and "25 rounds" in hover and "median" in hover
    # a filter narrows the list, and the link it writes opens the same view
    page.select_option("#filter-variant", "naive_inplace")
    assert cards.count() == 1 and "1 of 1 matching" in page.inner_text("#series-count")
    assert "variant=naive_inplace" in page.url
    assert "point(s) set aside (contended) drawn apart" in cards.first.inner_text()
    # the post's checks and the fastest implementation
    # the live checks: naive now makes 2 score copies where the post says 1 (the planted one); the others hold
    assert (
        page.locator("#checks tr.ok").count() == 2 and page.locator("#checks tr.bad").count() == 1
    )
    assert "2 score copies per forward" in page.inner_text("#checks tr.bad")
    assert "sdpa_math" in page.inner_text("#fastest")
    page.goto((out / "index.html").resolve().as_uri() + "#variant=sdpa_math")
    page.wait_for_selector("body[data-ready]")
    assert cards.count() == 1


def planted_dashboard(commits: int = 12, bad: int = 8) -> Dashboard:
    """A dashboard model with a known change point (naive, +40% from commit ``bad``, one extra copy)."""
    shas = [f"{i:02d}{'ab' * 19}" for i in range(commits)]
    series = []
    for variant, slow in (("naive", 1.4), ("naive_inplace", 1.0)):
        points = [
            point_from_rounds(
                sha,
                [100e-6 * (slow if i >= bad else 1.0) * (1 + 0.01 * (r % 5)) for r in range(20)],
                structure="b" if slow > 1 and i >= bad else "a",
                copies=(1 if variant == "naive" else 0) + (1 if slow > 1 and i >= bad else 0),
            )
            for i, sha in enumerate(shas)
        ]
        changes = (
            [ChangePoint(shas[bad - 1], shas[bad], 1.4, 1.36, 1.44, CAUSE)] if slow > 1 else []
        )
        series.append(
            Series(
                f"{variant}-fwd",
                variant,
                "b2h8s256d64-fp32-causal-cpu",
                "forward",
                "fp32",
                "wall",
                "tb",
                points,
                changes,
            )
        )
    return Dashboard(
        "perfsuite dashboard",
        [Commit(s, f"2026-01-{i + 1:02d}T12:00:00Z", f"commit {i}") for i, s in enumerate(shas)],
        series,
        [SiteTestbed("tb", "Test CPU (2 threads)")],
        repo_url="https://github.com/org/repo",
    )


def test_findings_list_the_change_point_with_commits_and_cause(tmp_path, page):
    dashboard = planted_dashboard()
    index = write_site(dashboard, tmp_path / "site")
    open_site(page, index)
    row = page.locator("#changes tbody tr")
    assert row.count() == 1
    text = row.first.inner_text()
    good, bad = dashboard.commits[7].sha, dashboard.commits[8].sha
    assert CAUSE in text and "+40.0%" in text and good[:8] in text and bad[:8] in text
    assert row.first.locator(f"a[href='https://github.com/org/repo/commit/{bad}']").count() == 1
    card = page.locator("article.series[data-series='naive-fwd']")
    card.scroll_into_view_if_needed()
    page.wait_for_function("window.perfsuiteCharts['naive-fwd'] !== undefined")
    assert card.locator("li.regression").inner_text().startswith("regression +40.0%")
    box = card.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    assert "2 score copies" in card.locator(".hover").inner_text()  # a point after the change
    shoot(page, "series", tmp_path, "article.series[data-series='naive-fwd']")
    # the comparison opens on the newest regression's last good and first bad commit
    page.locator("#compare").scroll_into_view_if_needed()
    compare = page.locator("#compare-table tbody tr")
    assert compare.count() == 2
    first = compare.first.inner_text()
    assert (
        "naive \u00b7" in first
        and "1.400x" in first
        and CAUSE in first
        and "score copies 1 -> 2" in first
    )
    assert "same structure" in compare.nth(1).inner_text()
    shoot(page, "comparison", tmp_path, "#compare")


def test_a_foreign_folder_is_never_overwritten(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "notes.txt").write_text("mine")
    from perfsuite.errors import UsageError

    with pytest.raises(UsageError, match="not a folder written by perfsuite dashboard"):
        write_site(planted_dashboard(), tmp_path / "site")
    assert (tmp_path / "site" / "notes.txt").read_text() == "mine"


def test_the_run_report_is_findings_first_with_error_bars(tmp_path, page):
    """``perfsuite report --html``: one file, findings first, the dashboard's charts with error bars."""
    import json

    example = (
        Path(__file__).resolve().parents[2] / "tests" / "data" / "runs" / "cpu-sequence-sweep.json"
    )
    data = json.loads(example.read_text())
    for r in data[
        "results"
    ]:  # the example kept no spread; give each median an IQR of 4% so bars are drawn
        r["iqr_s"] = r["median_s"] * 0.04 if r.get("median_s") else None
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(data))
    html = tmp_path / "report.html"
    assert main(["report", str(run_file), "--html", str(html)]) == 0
    open_site(page, html)
    order = page.evaluate("[...document.querySelectorAll('main > section')].map(s => s.id)")
    assert order[:4] == ["findings", "fastest", "checks", "groups"] and order[-1] == "detail"
    assert "copy the score matrix in the forward: naive" in page.inner_text("#notes")
    cases = {(r["case_id"], r["mode"]) for r in data["results"] if r.get("median_s") is not None}
    assert page.locator("#group-list article").count() == len(cases)
    first = page.locator("#group-list article").first
    timed = [
        r
        for r in data["results"]
        if r.get("median_s") is not None and (r["case_id"], r["mode"]) == sorted(cases)[0]
    ]
    assert first.get_attribute("data-points") == str(len(timed))
    assert "[" in page.inner_text("#fastest")  # runner-up ratios with intervals
    shoot(page, "report", tmp_path)


def test_the_page_recorder_catches_console_errors_and_requests(browser, tmp_path):
    from dashboard_browser import record_problems

    bad = tmp_path / "bad.html"
    bad.write_text(
        "<script>console.error('boom'); fetch('http://127.0.0.1:9/x').catch(() => {});</script>"
        "<img src='http://127.0.0.1:9/y.png'>"
    )
    context = browser.new_context()
    opened = context.new_page()
    problems = record_problems(opened)
    opened.goto(bad.as_uri())
    opened.wait_for_timeout(500)
    context.close()
    assert any("console error: boom" in p for p in problems), problems
    assert any("network request: http://127.0.0.1:9/" in p for p in problems), problems


def test_two_testbeds_side_by_side(tmp_path, page):
    import dataclasses

    dashboard = planted_dashboard()
    faster = [
        dataclasses.replace(
            s,
            id=s.id + "-gpu",
            testbed="tb2",
            change_points=[],
            points=[
                dataclasses.replace(p, median_s=p.median_s / 2, q1_s=p.q1_s / 2, q3_s=p.q3_s / 2)
                for p in s.points
            ],
        )
        for s in dashboard.series
    ]
    dashboard.series.extend(faster)
    dashboard.testbeds.append(SiteTestbed("tb2", "Other machine"))
    open_site(page, write_site(dashboard, tmp_path / "site"))
    page.select_option("#compare-kind", "testbeds")
    page.select_option("#compare-a", "tb")
    page.select_option("#compare-b", "tb2")
    rows = page.locator("#compare-table tbody tr")
    assert rows.count() == 2
    for i in range(2):
        text = rows.nth(i).inner_text()
        assert "Test CPU (2 threads) vs Other machine" in text and "0.500x" in text, text
    page.select_option("#filter-variant", "naive")  # the filters apply to the comparison too
    assert rows.count() == 1


def test_a_count_step_reads_as_counts_and_compare_never_shows_null(tmp_path, page):
    """A score-copy regression that ``history detect`` confirmed with no timing step (every time contended):
    the findings give its size as counts; Compare says a count that was not recorded, never ``null``."""
    import dataclasses

    dashboard = planted_dashboard()
    naive = dashboard.series[0]
    good, bad = dashboard.commits[7].sha, dashboard.commits[8].sha
    naive.points[7] = dataclasses.replace(naive.points[7], copies=None)
    naive.change_points[:] = [
        ChangePoint(good, bad, 1.0, 1.0, 1.0, CAUSE, size="0 -> 1 score copies", worse=True)
    ]
    open_site(page, write_site(dashboard, tmp_path / "site"))
    text = page.locator("#changes tbody tr").first.inner_text()
    assert "0 -> 1 score copies" in text and "regression" in text and "+0.0%" not in text
    page.locator("#compare").scroll_into_view_if_needed()
    first = page.locator("#compare-table tbody tr").first.inner_text()
    assert "score copies not recorded -> 2" in first and "null" not in first


def test_a_fast_variant_that_failed_the_float64_check_is_never_called_fastest(tmp_path, page):
    """A wrong variant 3.8x ahead of every other on one case: the page's fastest names the fastest
    correct one, and the findings name the wrong one."""
    import json

    example = (
        Path(__file__).resolve().parents[2] / "tests" / "data" / "runs" / "cpu-sequence-sweep.json"
    )
    data = json.loads(example.read_text())
    timed = [r for r in data["results"] if r.get("median_s") is not None]
    first_case = sorted({(r["case_id"], r["mode"]) for r in timed})[0]
    here = sorted(
        (r for r in timed if (r["case_id"], r["mode"]) == first_case), key=lambda r: r["median_s"]
    )
    wrong = {**here[0], "variant": "wrong_fast", "median_s": here[0]["median_s"] / 3.8}
    wrong.update(correct=False, max_abs_error=0.5)
    data["results"].append(wrong)
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(data))
    html = tmp_path / "report.html"
    assert main(["report", str(run_file), "--html", str(html)]) == 0
    open_site(page, html)
    assert "wrong_fast" not in page.inner_text("#fastest")
    assert here[0]["variant"] in page.inner_text("#fastest")
    assert "wrong_fast on" in page.inner_text("#notes")

"""The dashboard's model and its embedded JSON: columnar series, commits shared, times in microseconds."""

from __future__ import annotations

import json

import pytest

from perfsuite.dashboard.model import (
    ChangePoint,
    Commit,
    Dashboard,
    Series,
    median_interval_s,
    point_from_rounds,
    quartiles_s,
    to_json,
)
from perfsuite.dashboard.site import embedded_json, page


def dashboard(cause: str = "") -> Dashboard:
    commits = [Commit("a" * 40, "2026-01-01T00:00:00Z"), Commit("b" * 40), Commit("c" * 40)]
    points = [
        point_from_rounds(
            c.sha,
            [1e-4, 2e-4, 3e-4, 4e-4],
            contended=i == 1,
            structure="x" if i == 0 else "y",
            copies=i,
        )
        for i, c in enumerate(commits[::2])
    ]
    series = Series(
        "s1",
        "naive",
        "b1h2s16d8-fp32-causal-cpu",
        "forward",
        "fp32",
        "wall",
        "tb",
        points,
        [ChangePoint("a" * 40, "c" * 40, 1.5, 1.4, 1.6, cause)],
    )
    return Dashboard("t", commits, [series])


def test_series_are_columnar_with_commit_indices_and_microseconds():
    data = to_json(dashboard())
    [s] = data["series"]
    assert s["c"] == [0, 2] and s["n"] == [4, 4] and s["k"] == [1]
    assert s["m"] == [250.0, 250.0] and s["q1"] == [175.0, 175.0] and s["q3"] == [325.0, 325.0]
    assert s["st"] == ["x", "y"] and s["s"] == [0, 1] and s["cp"] == [0, 1]
    assert s["changes"] == [
        {
            "good": 0,
            "bad": 2,
            "ratio": 1.5,
            "lo": 1.4,
            "hi": 1.6,
            "cause": "",
            "open": True,
            "size": "",
            "worse": True,
            "status": "open",
            "note": "",
            "finding": "",
        }
    ]


def test_a_point_of_an_unknown_commit_is_refused():
    bad = dashboard()
    bad.commits.pop()
    with pytest.raises(ValueError, match="'cccc.*' is not in the dashboard's commit list"):
        to_json(bad)


def test_quartiles_and_the_median_interval():
    assert quartiles_s([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    low, high = median_interval_s(point_from_rounds("a", [1.0, 2.0, 3.0, 4.0, 5.0]))
    assert low == pytest.approx(3 - 1.58 * 2 / 5**0.5) and high == pytest.approx(
        3 + 1.58 * 2 / 5**0.5
    )
    with pytest.raises(ValueError, match="at least one round"):
        quartiles_s([])


def test_embedded_data_cannot_close_its_script_element():
    text = page(to_json(dashboard(cause="</script><script>alert(1)</script>")))
    start = text.index("id='perfsuite-data'>") + len("id='perfsuite-data'>")
    body = text[start : text.index("</script>", start)]
    assert json.loads(body)["series"][0]["changes"][0]["cause"].startswith("</script>")
    assert "<script>alert" not in embedded_json({"x": "<script>alert"})


def test_the_posts_checks_follow_the_mask():
    from perfsuite.dashboard.findings import checks_from

    checks = checks_from(
        [
            (
                "naive",
                "b1h2s16d8-fp32-causal-cpu",
                "tb",
                "2.13.0",
                1.0,
                None,
            ),  # hides keys: one copy, as the post says
            (
                "naive",
                "b1h2s16d8-fp32-noncausal-cpu",
                "tb",
                "2.13.0",
                0.0,
                None,
            ),  # hides nothing: no masked_fill, no copy
            (
                "naive_inplace",
                "b1h2s16d8-fp32-causal-cpu",
                "tb",
                "2.13.0",
                1.0,
                None,
            ),  # lost its in-place op
            (
                "sdpa_flash",
                "b1h2s16d8-fp32-causal-cpu",
                "tb",
                "2.13.0",
                0.0,
                {"sdpa_backends": ["MATH"]},
            ),  # fell back
            ("naive", "my-own-case", "tb", "2.13.0", 3.0, None),  # not a perfsuite case: no check
        ]
    )
    assert [(c.variant, c.ok) for c in checks] == [
        ("naive", True),
        ("naive", True),
        ("naive_inplace", False),
        ("sdpa_flash", False),
    ]
    assert checks[3].observed == "MATH" and checks[3].expected == "FLASH_ATTENTION"

"""The dashboard as a user gets it: a throwaway git repository with its own attention function and perfsuite
installed into its virtualenv, the timed suite (``perfsuite run``) on three commits (a base, a comment-only
change, then 30 extra copies of the score matrix), then ``perfsuite dashboard``: the site's first screen names
the planted regression's commits and its structural cause, in Debian's headless chromium, with no console error
and no network request. The planted change is large and the outcome does not depend on the machine's speed
(the structural cause is counted, not timed); the contention check is off so a loaded machine is judged too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from validation.user_repo import ATTENTION_PY, BLOCKED_ATTENTION, myattn_repo

pytestmark = pytest.mark.slow

CASE = "b1h2s64d16-fp32-causal-cpu"
COPIES = (
    "    for _ in range(300):\n        scores = scores.clone()  # planted: score-sized copies\n"
)
TIMED = (
    "--benchmark-min-rounds=15",
    "--benchmark-max-time=0.05",
    "--benchmark-warmup=on",
    "--benchmark-warmup-iterations=3",
)


def test_three_timed_commits_give_a_site_whose_first_screen_names_the_regression(tmp_path, page):
    repo = myattn_repo(
        tmp_path / "repo",
        CASE,
        ignore=("site/",),
        env={
            "PERFSUITE_CONTENTION_CHECK": "off",
            "PYTHONPATH": "src",
            "PERFSUITE_HISTORY_URL": None,
        },
    )
    repo.install_perfsuite()
    shas = []
    for message, code in (
        ("base", BLOCKED_ATTENTION),
        ("a comment only", BLOCKED_ATTENTION.replace('"""Softmax', '"""Plain softmax')),
        (
            "planted: 300 copies of the scores",
            BLOCKED_ATTENTION.replace(
                "    if mask.masked_out", COPIES + "    if mask.masked_out", 1
            ),
        ),
    ):
        shas.append(repo.commit(message, {ATTENTION_PY: code}))
        timed = repo.perfsuite("run", *TIMED)  # the planted commit fails the suite's copy check
        assert "perfsuite: history: recorded 1 benchmark(s)" in timed.stdout, (
            timed.stdout[-3000:] + timed.stderr
        )
    written = repo.perfsuite(
        "dashboard", "--out", "site", "--repo-url", "https://github.com/example/myattn"
    )
    assert written.returncode == 0, written.stderr
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto((repo.path / "site" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready]", timeout=20_000)
    row = page.locator("#changes tbody tr").first
    assert row.is_visible() and row.bounding_box()["y"] < 900  # on the first screen
    text = row.inner_text()
    assert "blocked_attention" in text and "slower" in text, text
    assert shas[1][:8] in text and shas[2][:8] in text, text  # last good, first bad
    assert "copy cpu aten::clone [1x2x64x64]" in text, text
    if os.environ.get("PERFSUITE_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["PERFSUITE_SCREENSHOTS"]) / "three-commits.png"))

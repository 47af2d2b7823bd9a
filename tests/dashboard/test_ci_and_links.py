"""The workflow init-ci writes records main's runs and publishes the dashboard (pinned actions, lint clean), and
the gate's summary links the dashboard and the series of each flagged benchmark."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.cli.init_ci import render
from perfsuite.cli.main import main
from perfsuite.dashboard.links import flagged, series_link, summary_links

BIN = Path(sys.executable).parent


def workflow() -> str:
    return render(
        "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
        "git+https://github.com/example/perfsuite@v0.1.0",
        "3.11",
        None,
    )


def test_main_pushes_record_into_the_store_and_publish_the_dashboard():
    text = workflow()
    assert "push:\n    branches: [main]" in text
    history = text[text.index("\n  history:") : text.index("\n  pages:")]
    assert (
        "if: github.event_name == 'push'" in history and "secrets.PERFSUITE_HISTORY_URL" in history
    )
    assert (
        "perfsuite run\n" in history
        and "perfsuite history record" in history
        and "perfsuite dashboard --out perfsuite-dashboard" in history
    )
    assert "name: perfsuite-history" in history and "actions/upload-pages-artifact@" in history
    pages = text[text.index("\n  pages:") :]
    assert (
        "pages: write" in pages and "id-token: write" in pages and "actions/deploy-pages@" in pages
    )
    for uses in re.findall(r"uses: (\S+)", text):
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), (
            uses
        )  # every action pinned by SHA
    assert (
        "perfsuite dashboard --links gate/ab.json" in text
    )  # the gate's summary links the dashboard


@pytest.mark.slow
def test_the_workflow_lints_clean(tmp_path):
    path = tmp_path / "perfsuite-gate.yml"
    path.write_text(workflow())
    lint = subprocess.run([BIN / "actionlint", str(path)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    zizmor = subprocess.run(
        [BIN / "zizmor", "--offline", "--no-progress", str(path)], capture_output=True, text=True
    )
    assert zizmor.returncode == 0 and "No findings" in zizmor.stdout + zizmor.stderr, (
        zizmor.stdout + zizmor.stderr
    )


AB = {
    "benchmarks": [
        {
            "key": "naive/b2h8s256d64-fp32-causal-cpu",
            "verdict": "slower",
            "structure": ["+1 copy cpu aten::clone [2x8x256x256]"],
        },
        {"key": "sdpa/b2h8s256d64-fp32-causal-cpu/backward", "verdict": "same", "structure": []},
        {
            "key": "naive_inplace/b2h8s256d64-fp32-causal-cpu/backward",
            "verdict": "inconclusive",
            "structure": ["-1 aten::clone"],
        },
    ]
}


def test_the_summary_links_each_flagged_benchmarks_series(tmp_path, capsys):
    assert [f[:3] for f in flagged(AB)] == [
        ("naive", "b2h8s256d64-fp32-causal-cpu", "forward"),
        ("naive_inplace", "b2h8s256d64-fp32-causal-cpu", "backward"),
    ]
    (tmp_path / "ab.json").write_text(json.dumps(AB))
    assert (
        main(
            [
                "dashboard",
                "--links",
                str(tmp_path / "ab.json"),
                "--site-url",
                "https://org.github.io/repo/",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "[the perfsuite dashboard](https://org.github.io/repo/index.html)" in out
    assert series_link("https://org.github.io/repo/", "naive", "b2h8s256d64-fp32-causal-cpu") in out
    assert "slower; +1 copy cpu aten::clone [2x8x256x256]" in out and "sdpa/" not in out


def test_links_refuse_a_file_that_is_not_an_ab_output(tmp_path, capsys):
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(Exception, match="not a perfsuite ab --json file"):
        summary_links(tmp_path / "x.json", "https://x/")
    assert (
        main(["dashboard", "--links", str(tmp_path / "missing.json"), "--site-url", "https://x/"])
        == 2
    )
    assert "missing.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(document.cookie)", "data:text/html,x", "file:///etc", "github.com/o/r"],
)
def test_a_repo_url_that_is_no_web_address_is_refused(tmp_path, capsys, url):
    """The page turns ``--repo-url`` into commit links: only http(s) with a host is allowed."""
    from perfsuite.cli.main import main
    from perfsuite.history import open_store

    store = f"sqlite:///{tmp_path / 'h.sqlite'}"
    open_store(store).close()  # an empty store: the site would be written from it
    with pytest.raises(SystemExit) as raised:
        main(["dashboard", "--store", store, "--out", str(tmp_path / "site"), "--repo-url", url])
    assert raised.value.code == 2
    assert f"{url!r}: allowed: an http:// or https:// URL with a host" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()

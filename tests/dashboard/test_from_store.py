"""The dashboard's model read from a real history store (SQLite): series, change points with their cause, epochs,
the fastest implementation and the post's checks."""

from __future__ import annotations

from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.history import open_store

from dashboard_store import BYTES, FLOP, PEAKS, build_store


def test_the_model_names_the_planted_change_its_cause_and_the_epoch(history_store):
    url, shas = history_store
    with open_store(url, create=False) as store:
        model = dashboard_from_store(store, repo_url="https://github.com/org/repo")
    assert [c.sha for c in model.commits] == shas
    by_variant = {s.variant: s for s in model.series}
    assert set(by_variant) == {"naive", "naive_inplace", "sdpa_math"} and {
        s.measure for s in model.series
    } == {"time"}
    [change] = by_variant["naive"].change_points
    assert (change.last_good, change.first_bad, change.open) == (shas[3], shas[4], True)
    assert 1.3 < change.ratio_low < change.ratio < change.ratio_high < 1.5
    assert (
        "+1 copy cpu aten::clone [2x8x256x256]" in change.cause
        and "allocated +4.0 MiB per step" in change.cause
    )
    assert (
        not by_variant["naive_inplace"].change_points and not by_variant["sdpa_math"].change_points
    )
    assert [e.label for e in by_variant["naive"].epochs] == ["torch 2.12.0 -> 2.13.0"]
    assert by_variant["naive_inplace"].points[1].contended
    [fastest] = model.fastest
    assert (fastest.variant, fastest.runner_up) == (
        "sdpa_math",
        "naive_inplace",
    ) and fastest.ratio_low > 1
    # the roofline from the run's stored peaks: FLOP / byte x bandwidth is below the matmul peak here
    newest = by_variant["sdpa_math"].points[-1]
    achieved = FLOP / newest.median_s / 1e12
    attainable = min(PEAKS["matmul_tflops"]["fp32"], FLOP / BYTES * PEAKS["memory_gbps"] / 1e3)
    assert abs(fastest.roofline - achieved / attainable) < 0.02 * fastest.roofline
    assert fastest.roof == "100 GB/s bandwidth roof"
    assert {(c.variant, c.ok) for c in model.checks} == {
        ("naive", False),
        ("naive_inplace", True),
        ("sdpa_math", True),
    }
    assert [c.observed for c in model.checks if c.variant == "naive"] == [
        "2 score copies per forward"
    ]


def test_without_stored_peaks_the_fastest_has_no_roofline(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    build_store(url, peaks=None)
    with open_store(url, create=False) as store:
        [fastest] = dashboard_from_store(store).fastest
    assert (fastest.roofline, fastest.roof) == (None, "")


def test_a_device_clock_adds_the_wall_time_series(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    build_store(url, variants=("naive",), device_clock=True)
    with open_store(url, create=False) as store:
        model = dashboard_from_store(store)
    assert sorted(s.measure for s in model.series) == ["time", "wall"]


def test_the_command_refuses_a_missing_or_foreign_store_and_writes_nothing(tmp_path, capsys):
    from perfsuite.cli.main import main

    assert (
        main(
            ["dashboard", "--store", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "site")]
        )
        == 2
    )
    assert "none.sqlite: no history store yet" in capsys.readouterr().err
    (tmp_path / "notes.sqlite").write_text("my notes")
    assert (
        main(
            [
                "dashboard",
                "--store",
                str(tmp_path / "notes.sqlite"),
                "--out",
                str(tmp_path / "site"),
            ]
        )
        == 2
    )
    assert "notes.sqlite: not a perfsuite history store" in capsys.readouterr().err
    assert (tmp_path / "notes.sqlite").read_text() == "my notes" and not (
        tmp_path / "site"
    ).exists()


def test_a_fleets_shards_of_one_commit_are_one_commit_on_the_dashboard(tmp_path):
    """Three shards per commit, each timing other variants: one commit each, every series whole."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    shas = build_store(url, shards=3)
    with open_store(url, create=False) as store:
        assert len(store.runs()) == 3 * len(shas)
        model = dashboard_from_store(store)
    assert [c.sha for c in model.commits] == shas
    by_variant = {s.variant: s for s in model.series}
    assert set(by_variant) == {"naive", "naive_inplace", "sdpa_math"}
    assert all(len(s.points) == len(shas) for s in model.series)
    [change] = by_variant["naive"].change_points
    assert (change.last_good, change.first_bad) == (shas[3], shas[4])

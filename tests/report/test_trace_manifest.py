"""Each run's traces are listed apart, with how the run ended."""

from perfsuite.report.trace_manifest import TraceManifest, read_manifest


def test_two_runs_traces_are_told_apart_and_an_interrupted_run_says_so(tmp_path):
    first = TraceManifest(tmp_path, "run-1")
    first.start()
    for name in ("a.pt.trace.json.gz", "b.pt.trace.json.gz"):
        (tmp_path / name).write_text("{}")
        first.add(tmp_path / name)
    first.finish("complete")
    second = TraceManifest(tmp_path, "run-2")
    second.start()
    second.add(
        tmp_path / "a.pt.trace.json.gz"
    )  # rewritten by the second run, which is then interrupted
    second.finish("interrupted")
    runs = read_manifest(tmp_path)
    assert [(r["run_id"], r["status"], r["traces"]) for r in runs] == [
        ("run-1", "complete", ["b.pt.trace.json.gz"]),
        ("run-2", "interrupted", ["a.pt.trace.json.gz"]),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.pt.trace.json.gz",
        "b.pt.trace.json.gz",
        "manifest.json",
    ]


def test_a_run_that_dies_stays_running_and_a_corrupt_manifest_is_replaced_not_fatal(tmp_path):
    (tmp_path / "manifest.json").write_text('{"runs": [')
    crashed = TraceManifest(tmp_path, "run-3")
    crashed.add(tmp_path / "c.pt.trace.json.gz")  # no finish: the process died
    assert [(r["run_id"], r["status"]) for r in read_manifest(tmp_path)] == [("run-3", "running")]

"""Every check can fail: the corpus of adversarial variants, run through the real suite once, each
failing with its reason named (and the honest variants passing every test)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from perfsuite.attention.cases import parse_case_id
from perfsuite.measure.evidence import gather_evidence
from perfsuite.variants import get_variant, registry, user

HERE = Path(__file__).resolve().parent
SUITE = (HERE.parents[1] / "perfsuite" / "suite" / "test_attention.py").read_text()
CASE = "b2h2s8d4-fp32-causal-cpu"


@pytest.fixture(scope="module")
def torch_imported(tmp_path_factory):
    """pytester restores ``sys.modules`` at its teardown to what it held at its setup, so torch modules
    first imported during the test (torch._dynamo, the profiler, torch.distributed.tensor by
    ``assert_close``) would be imported again by later tests, which torch's operator registrations
    refuse. One evidence gathered before pytester is set up (a wider scope) imports them first."""
    gather_evidence(
        get_variant("sdpa"),
        parse_case_id(CASE),
        0,
        tmp_path_factory.mktemp("warm"),
        "forward_backward",
    )


@pytest.fixture
def corpus(torch_imported, monkeypatch):
    """The corpus module, importable by the suite's ``--perfsuite-variant``; its variants and the
    threads it starts are gone again afterwards."""
    monkeypatch.syspath_prepend(str(HERE))
    before = set(registry.variant_names())
    import adversarial_variants

    yield adversarial_variants
    adversarial_variants.STOP.set()
    for name in set(registry.variant_names()) - before:
        registry.unregister_variant(name)
    user._LOADED[:] = [n for n in user._LOADED if n not in adversarial_variants.EXPECTED]
    sys.modules.pop("adversarial_variants", None)


def _variant_of(nodeid: str) -> str:
    return re.search(r"\[(.+?)-" + re.escape(CASE), nodeid).group(1)


def test_each_adversarial_variant_fails_with_its_reason_named(torch_imported, pytester, corpus):
    pytester.makepyfile(test_attention=SUITE)
    names = list(corpus.EXPECTED)
    specs = [
        arg for name in names for arg in ("--perfsuite-variant", f"adversarial_variants:{name}")
    ]
    result = pytester.runpytest_inprocess(
        *specs,
        "--perfsuite-variants",
        ",".join(names),
        "--perfsuite-cases",
        CASE,
        "--perfsuite-modes",
        "forward,forward_backward",
        "-k",
        "not forward_backward",  # backward evidence only where a test needs it (saved scores)
        "--perfsuite-isolate",
        "none",
        "--perfsuite-call-time-limit",
        "2",
        "--perfsuite-determinism-runs",
        "3",
        "--benchmark-min-rounds=1",
        "--benchmark-max-time=0.001",
        "--benchmark-warmup=off",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    )
    failures: dict[str, dict[str, str]] = {name: {} for name in names}
    not_timed = set()
    for report in result.reprec.getreports("pytest_runtest_logreport"):
        if (
            report.skipped
            and "test_benchmark[" in report.nodeid
            and "not timed" in str(report.longrepr)
        ):
            not_timed.add(_variant_of(report.nodeid))
        if report.failed:
            test = report.nodeid.split("::")[-1].split("[")[0]
            failures[_variant_of(report.nodeid)][test] = report.longreprtext
    missed = []
    for name, expected in corpus.EXPECTED.items():
        if not expected and failures[name]:
            missed.append(f"{name} should pass, failed {sorted(failures[name])}: {failures[name]}")
        for test, words in expected:
            text = failures[name].get(test)
            if text is None or words not in text:
                missed.append(f"{name}: {test} did not fail naming {words!r}: {text!r:.600}")
    assert not missed, "\n".join(missed)
    # a variant that changed its inputs is not timed: a skip naming the test that fails for it, not a second failure
    assert "mutates_query" in not_timed and "mutates_query" not in {
        n for n, tests in failures.items() if "test_benchmark" in tests
    }
    out = result.stdout.str()
    # memory kept across calls: a warning with bytes per call, and the row flagged
    assert re.search(
        r"WARNING: variant keeps_memory on \S+ \(forward\) keeps 8\.\d MiB per call", out
    )
    assert re.search(r"keeps_memory .*KEPT/call", out)
    assert re.search(r"deterministic_sdpa .* yes", out)  # bitwise reproducible, in the table


PATCHES_AT_IMPORT = """
import torch
import torch.nn.functional as F

_matmul = torch.matmul
torch.matmul = lambda a, b: _matmul(a, b) * 0.5  # the float64 reference would use it


def attention(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
"""


def test_a_module_that_patches_torch_at_import_is_refused_with_the_change_named(
    torch_imported, pytester, monkeypatch
):
    """A user module that replaces ``torch.matmul`` when imported: the run refuses to start, names
    the module and the replaced function, and torch.matmul is the original again."""
    import torch

    original = torch.matmul
    pytester.makepyfile(test_attention=SUITE, patches_at_import=PATCHES_AT_IMPORT)
    monkeypatch.syspath_prepend(str(pytester.path))
    try:
        result = pytester.runpytest_inprocess(
            "--perfsuite-variant",
            "patches_at_import:attention",
            "--perfsuite-cases",
            CASE,
            "--co",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        )
        after = torch.matmul
    finally:
        torch.matmul = original
        sys.modules.pop("patches_at_import", None)
        if "attention" in registry.variant_names():
            registry.unregister_variant("attention")
        user._LOADED[:] = [n for n in user._LOADED if n != "attention"]
    assert after is original
    assert result.ret != 0
    text = result.stdout.str() + result.stderr.str()
    assert "importing patches_at_import:attention changed" in text, text
    assert "replaced torch.matmul with patches_at_import.<lambda>" in text, text

"""The documentation site: its reference pages come from the code, and its navigation names existing pages.

The strict build itself (every link and anchor checked) runs in CI through scripts/docs.sh; these tests
need no MkDocs and check that each generated page carries the facts of the objects it is generated from.
"""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location(
        "perfsuite_docs_reference", DOCS / "gen" / "reference.py"
    )
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    return {path: make_page() for path, make_page in reference.PAGES.items()}


def test_the_kernel_families_page_shows_the_rules_the_code_applies(pages):
    from perfsuite.trace.kernel_families import rules_markdown

    assert rules_markdown() in pages["reference/kernel-families.md"]


def test_every_column_setting_case_set_and_variant_has_its_row(pages):
    from perfsuite.attention.case_sets import CASE_SETS
    from perfsuite.report.results import COLUMNS
    from perfsuite.suite.settings import SETTINGS
    from perfsuite.variants import variant_names

    assert all(f"| `{c.header}` |" in pages["reference/columns.md"] for c in COLUMNS)
    assert all(f"`{s.ini_key}`" in pages["reference/configuration.md"] for s in SETTINGS.values())
    assert all(f"| `{name}` |" in pages["reference/case-sets.md"] for name in CASE_SETS)
    assert all(f"| `{name}` |" in pages["reference/variants.md"] for name in variant_names())


def test_every_subcommand_and_plugin_option_is_documented(pages):
    from perfsuite.cli.main import build_parser

    parser = build_parser()
    for sub in next(a for a in parser._actions if a.dest == "command").choices:
        assert f"## `perfsuite {sub}`" in pages["reference/cli.md"]
    assert "`--perfsuite-gate`" in pages["reference/pytest-options.md"]
    assert "`--fail-on-structure`" in pages["reference/cli.md"]


def test_the_stored_data_page_lists_every_extra_info_key(pages):
    text = pages["reference/schemas.md"]
    for key in ("schema_version", "case_fields", "score_accounting", "fingerprint"):
        assert f"`{key}`" in text


def test_navigation_names_only_pages_that_exist_or_are_generated(pages):
    nav = re.findall(
        r":\s+([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), flags=re.M
    )
    generated = set(pages) | {"changelog.md"}
    missing = [p for p in nav if p not in generated and not (DOCS / p).is_file()]
    assert nav and not missing, f"mkdocs.yml names pages that do not exist: {missing}"


def test_docs_hold_no_raw_measurement_output():
    raw = [
        p.relative_to(ROOT)
        for p in DOCS.rglob("*")
        if p.suffix in {".json", ".html", ".log", ".svg"}
    ]
    assert not raw, f"raw output belongs to the validation tool's --out folders, not docs/: {raw}"


def test_the_readme_states_the_test_command_and_stays_short():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in readme
    assert len(readme.splitlines()) <= 250


def test_the_committed_reference_pages_are_current():
    """README and the tutorials link ``docs/reference/*.md``: committed, and equal to what the code generates."""
    spec = importlib.util.spec_from_file_location(
        "perfsuite_docs_reference", DOCS / "gen" / "reference.py"
    )
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    stale = [
        path
        for path, text in reference.generated().items()
        if not (DOCS / path).exists() or (DOCS / path).read_text(encoding="utf-8") != text
    ]
    assert not stale, (
        f"{', '.join(stale)}: not current; run python docs/gen/reference.py and commit"
    )


def test_links_to_reference_pages_resolve_in_the_repository():
    """Every relative link to a ``reference/*.md`` page, from README and the docs, names a committed file."""
    broken = []
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for target in re.findall(
            r"\]\(([^)#\s]*reference/[\w-]+\.md)", page.read_text(encoding="utf-8")
        ):
            if not (page.parent / target).resolve().is_file():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def score_mod_examples() -> dict[str, object]:
    """The Python examples of add-your-attention.md's score-modification section, by function name."""
    page = (DOCS / "how-to" / "add-your-attention.md").read_text()
    section = page.split("## Score modifications", 1)[1]
    functions: dict[str, object] = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        namespace: dict[str, object] = {}
        exec(compile(block, "add-your-attention.md", "exec"), namespace)
        functions.update({k: v for k, v in namespace.items() if k.endswith("_attention")})
    return functions


def test_the_alibi_softcap_and_sink_examples_pass_on_modified_gqa_decode_and_prefill_cases():
    from perfsuite.attention.cases import AttentionCase
    from perfsuite.attention.score_mods import ScoreMods
    from perfsuite.testing.properties import ALL_CHECKS, applicable, check_matches_reference
    from perfsuite.variants.registry import Variant, declared_forms

    examples = score_mod_examples()
    assert set(examples) == {"alibi_attention", "softcap_attention", "sink_attention"}
    for name, mods in (
        ("alibi_attention", ScoreMods(alibi=True)),
        ("softcap_attention", ScoreMods(softcap=1.0)),
        ("sink_attention", ScoreMods(sinks=True)),
    ):
        fn = examples[name]
        variant = Variant(name=name, fn=fn, description="", forms=declared_forms(fn))
        assert mods.forms <= variant.forms
        for sq, mask in ((1, "causal_br"), (4, "window3")):
            case = AttentionCase(2, 4, sq, 9, 8, "fp32", "cpu", mask, 2, score_mods=mods)
            assert check_matches_reference(variant, case, 0) is None
        # every property perfsuite run --check applies, score copies (the profiler) included
        case = AttentionCase(1, 4, 3, 9, 8, "fp32", "cpu", "causal_br", 2, score_mods=mods)
        for check, run in ALL_CHECKS.items():
            if applicable(check, variant, case) is None:
                assert run(variant, case, 0) is None, check


def test_the_getting_started_example_shows_the_method_line_the_code_prints():
    """Before: the page's Method line described a Wilcoxon interval over 2 workers per side while
    ``perfsuite ab`` printed a t interval over 6. The line is read from the code (``ab_method`` with
    ``perfsuite ab``'s defaults), so a change of method makes this fail until the example is
    regenerated (``python docs/gen/getting_started.py``)."""
    spec = importlib.util.spec_from_file_location(
        "perfsuite_docs_getting_started", DOCS / "gen" / "getting_started.py"
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = (DOCS / "tutorials" / "getting-started.md").read_text()
    example = page.split(generator.EXAMPLE_START, 1)[1].split(generator.EXAMPLE_END, 1)[0]
    method = [line for line in example.splitlines() if line.startswith("Method: ")]
    assert method, "the generated example has no Method line"
    assert method[0].startswith("Method: " + generator.default_ab_method()), method[0]

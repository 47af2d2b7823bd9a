"""The reference pages of the documentation site, generated from perfsuite's code at build time.

Each ``*_page`` function returns one page's Markdown from the objects that define the facts
(argparse parsers, the plugin's options, ``SETTINGS``, ``COLUMNS``, ``CASE_SETS``, the kernel
rules, the exit codes, the stored records), so no page repeats a fact by hand. ``PAGES`` maps a
page path (relative to ``docs/``) to its function; ``gen_pages.py`` writes them for MkDocs and
``tests/test_docs.py`` checks them.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATED = (
    "<!-- generated from the code by docs/gen/reference.py: edit the code, not this page -->"
)


def _cell(text: object) -> str:
    """A value as one Markdown table cell (pipes escaped, newlines joined)."""
    cell = " ".join(str(text).split()).replace("|", "\\|")
    return cell.replace("[", "\\[").replace("]", "\\]")  # not Markdown links


def _code(text: object) -> str:
    value = str(text)
    return f"`{value}`" if value else ""


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _notes(name: str) -> str:
    """Hand-written prose that a generated page carries (``docs/gen/<name>.md``), or nothing."""
    path = HERE / f"{name}.md"
    return path.read_text(encoding="utf-8").strip() if path.exists() else ""


def _join(*parts: str) -> str:
    return "\n\n".join(part.strip() for part in parts if part and part.strip()) + "\n"


# ---------------------------------------------------------------- command line


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``name -> (help, parser)`` of each subcommand (argparse has no public accessor for them)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if (
            isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
            or action.help == argparse.SUPPRESS
        ):
            continue
        names = (
            ", ".join(f"`{name}`" for name in action.option_strings)
            or f"`{action.dest}` (positional)"
        )
        default = (
            "" if action.default in (None, False, argparse.SUPPRESS, []) else _code(action.default)
        )
        rows.append([names, default, _cell(action.help or "")])
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line wrapped at 100 columns, whatever the terminal (argparse reads COLUMNS)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_usage().strip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_page() -> str:
    """Every ``perfsuite`` subcommand: its usage and its arguments, from ``perfsuite.cli.main.build_parser``."""
    from perfsuite.cli.main import build_parser

    parser = build_parser()
    parts = [
        GENERATED,
        "# Command line: `perfsuite`",
        _cell(parser.description or ""),
        "`perfsuite run` passes every argument it does not know to pytest, so the plugin's options "
        "([pytest options](pytest-options.md)) work there too.",
    ]
    for name, (help_text, sub) in _subcommands(parser).items():
        usage = _usage(sub)
        parts += [
            f"## `perfsuite {name}`",
            _cell(help_text.capitalize() + "." if help_text else ""),
            _cell(sub.description or ""),
            f"```text\n{usage}\n```",
            _table(["argument", "default", "meaning"], _argument_rows(sub)),
        ]
    return _join(*parts)


def pytest_options_page() -> str:
    """The plugin's ``--perfsuite-*`` options and ``perfsuite_*`` ini keys, as the plugin registers them."""
    import pytest

    from perfsuite.suite import options

    with (
        warnings.catch_warnings()
    ):  # pytest marks a hand-made Parser as private API; it is only read here
        warnings.simplefilter("ignore", pytest.PytestDeprecationWarning)
        parser = pytest.Parser()
    options.add_options(parser)
    rows = []
    for group in parser._groups:  # pytest.Parser offers no public list of a group's options
        for option in group.options:
            attrs = option.attrs()
            default = attrs.get("default")
            shown = "" if default in (None, False, []) else _code(default)
            rows.append(
                [", ".join(f"`{n}`" for n in option.names()), shown, _cell(attrs.get("help", ""))]
            )
    ini_rows = [
        [f"`{name}`", _cell(help_text)]
        for name, (help_text, *_rest) in sorted(parser._inidict.items())
    ]
    return _join(
        GENERATED,
        "# pytest options and ini keys",
        "Registered by the plugin (`perfsuite/suite/options.py`), which pytest loads through the "
        "`pytest11` entry point. How settings combine: [configuration](configuration.md).",
        "## Options",
        _table(["option", "default", "meaning"], rows),
        "## Ini keys",
        _table(["ini key", "meaning"], ini_rows),
    )


def configuration_page() -> str:
    """The settings table (``perfsuite.suite.settings.SETTINGS``) with the hand-written rules around it."""
    from perfsuite.suite.settings import SETTINGS

    rows = [
        [
            _code(spec.option or ""),
            _code(spec.ini_key),
            _code(spec.default) if spec.default else "",
            _cell(spec.help),
        ]
        for spec in SETTINGS.values()
    ]
    return _join(
        GENERATED,
        "# Configuration",
        _notes("configuration-intro"),
        _table(["option", "ini key", "default", "meaning"], rows),
        _notes("configuration"),
    )


# ---------------------------------------------------------------- results and runs


def columns_page() -> str:
    """The results table's columns, from ``perfsuite.report.results.COLUMNS``."""
    from perfsuite.report.results import COLUMNS

    rows = [[f"`{column.header}`", column.unit or ""] for column in COLUMNS]
    return _join(
        GENERATED,
        "# Table columns",
        "The terminal table, `table.md` and the HTML report share these columns, in this order "
        "(`COLUMNS` in `perfsuite/report/results.py`). What each one measures: "
        "[reading the table](../explanation/reading-the-table.md).",
        _table(["column", "unit"], rows),
    )


def case_sets_page() -> str:
    """Every named case set, per device, from ``perfsuite.attention.case_sets.CASE_SETS``."""
    from perfsuite.attention.case_sets import CASE_SETS

    rows = []
    for name, case_set in CASE_SETS.items():
        for device in ("cpu", "cuda"):
            cases = getattr(case_set, device)
            rows.append(
                [
                    f"`{name}`",
                    device,
                    " ".join(
                        part
                        for part in (
                            _code(cases.shapes),
                            f"case ids {_code(cases.cases)}" if cases.cases else "",
                        )
                        if part
                    ),
                    cases.dtypes,
                    cases.masks,
                    cases.score_mods,
                    _cell(case_set.description) if device == "cpu" else "",
                ]
            )
    return _join(
        GENERATED,
        "# Case sets",
        "Chosen with `--perfsuite-case-set NAME` or `perfsuite_case_set`; the shape, dtype and mask "
        "settings refine a set ([configuration](configuration.md)). Shapes are "
        "`B x H[:Hkv] x S[:Skv] x D`; the suite runs the product of shapes, dtypes, masks and score "
        "modifications (ALiBi, softcap, sinks, query positions: `--perfsuite-score-mods`), and a "
        "set's exact case ids (layout cases: [serving shapes](../how-to/serving-shapes.md)).",
        _table(
            ["set", "device", "shapes", "dtypes", "masks", "score mods", "what it is for"], rows
        ),
        _notes("case-sets"),
    )


def variants_page() -> str:
    """Every built-in variant with its declarations, from the variant registry."""
    from perfsuite.variants import get_variant, variant_names

    def shown(value: object) -> str:
        return str(getattr(value, "value", value))

    rows = []
    for name in variant_names():
        v = get_variant(name)
        declared = [
            label
            for label, on in (
                ("compiled", v.compiled),
                ("fused", v.fused),
                ("copies scores when masked", v.copies_scores_when_masked),
            )
            if on
        ]
        if v.sdpa_backend:
            declared.append(f"SDPA backend {shown(v.sdpa_backend)}")
        if v.saves_scores_for_backward is not None:
            declared.append(f"saves scores for backward: {v.saves_scores_for_backward}")
        if v.forward_only:
            declared.append(f"forward only: {v.forward_only}")
        if v.wraps:
            declared.append(f"wraps {v.wraps}")
        if v.devices:
            declared.append(f"runs on {', '.join(map(shown, v.devices))} only")
        if v.forms:
            declared.append(f"forms: {', '.join(sorted(map(shown, v.forms)))}")
        if v.needs_a_form:
            declared.append("cases with forms only")
        if v.score_copy:
            declared.append(f"copies scores: {v.score_copy.why}")
        rows.append(
            [
                f"`{name}`",
                _cell(v.description),
                f"`{shown(v.fully_masked_rows)}`",
                _cell("; ".join(declared)),
            ]
        )
    return _join(
        GENERATED,
        "# Built-in variants",
        "Registered in `perfsuite/variants/` (declarations: `register_variant`, "
        "[add your attention](../how-to/add-your-attention.md)). *Rows that see no key*: what a query "
        "that sees no key returns (`zeros`, `nan`, `finite`, or `any`).",
        _table(["variant", "what it runs", "rows that see no key", "declarations"], rows),
        _not_generated_section(),
    )


def _not_generated_section() -> str:
    """What the suite does not generate (certain skips), from ``perfsuite.suite.generation`` and the
    conditions the suite's tests declare with its markers."""
    import perfsuite.suite.test_attention as attention_tests
    import perfsuite.suite.test_properties as property_tests
    from perfsuite.suite.generation import APPLIES_MARKER, EACH_MARKER

    rows = []
    for module in (attention_tests, property_tests):
        for name, fn in vars(module).items():
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == APPLIES_MARKER:
                    rows.append([f"`{name}`", _cell(mark.args[0].__doc__)])
                elif mark.name == EACH_MARKER:
                    argname, rule = mark.args[0], mark.args[2]
                    where = f"each `{argname}` that `{rule.__module__}.{rule.__name__}` rules out"
                    rows.append([f"`{name}`", _cell(where)])
    return _join(
        "## Not generated",
        "A test is not generated for a combination whose skip is certain before anything runs: a "
        "variant on a device it does not declare (*runs on ... only* above), a backward mode of a "
        "variant without a backward there (*forward only*), and the conditions below. The run "
        "prints how many combinations it left out and why (every reason with `-v`); the timed "
        "table lists each variant that cannot run a case as skipped. Skips that depend on running "
        "(torch refusing a case, a library that is not installed) remain skips with their reason.",
        _table(["test", "not generated where"], rows),
    )


def kernel_families_page() -> str:
    """The kernel-name rules, from ``perfsuite.trace.kernel_families.rules_markdown``."""
    from perfsuite.trace.kernel_families import flash_impl_rules_markdown, rules_markdown

    return _join(
        GENERATED,
        "# Kernel families",
        "Read from the kernel name (`perfsuite/trace/kernel_families.py`, the one place that reads "
        "kernel names); first match wins. A name no rule matches is `unknown`: shown, never guessed. "
        "`perfsuite trace --rules` prints the same tables.",
        _notes("kernel-families"),
        rules_markdown(),
        _notes("kernel-families-flash"),
        flash_impl_rules_markdown(),
    )


_GATE_EXIT_MEANINGS = {
    "EXIT_PASS": "no regression",
    "EXIT_REGRESSION": "a regression: a benchmark slower, or a structural change that adds work (unless `--no-fail-on-structure`)",
    "EXIT_UNUSABLE": "usage error, runs that cannot be compared, or nothing compared",
}


def exit_codes_page() -> str:
    """Exit codes of ``perfsuite compare/ab/init-ci/trace`` (``perfsuite.gate.flow``) and of pytest (``perfsuite run``)."""
    import pytest

    from perfsuite.cli import preflight
    from perfsuite.gate import flow

    names = sorted(
        (name for name in vars(flow) if name.startswith("EXIT_")), key=lambda n: getattr(flow, n)
    )
    unknown = [name for name in names if name not in _GATE_EXIT_MEANINGS]
    if unknown:
        raise RuntimeError(
            f"docs/gen/reference.py: describe the new exit codes {unknown} in _GATE_EXIT_MEANINGS"
        )
    gate_rows = [
        [str(getattr(flow, name)), f"`{name}`", _GATE_EXIT_MEANINGS[name]] for name in names
    ]
    pytest_rows = [[str(int(code)), f"`pytest.ExitCode.{code.name}`"] for code in pytest.ExitCode]
    return _join(
        GENERATED,
        "# Exit codes",
        "## `perfsuite ab`, `compare`, `init-ci`, `trace`, `report`",
        "From `perfsuite/gate/flow.py`; a usage error (`perfsuite.errors.UsageError`) is one line and code 2.",
        _table(["code", "name", "meaning"], gate_rows),
        "## `perfsuite run` and pytest",
        "`perfsuite run` is pytest, so it exits with pytest's codes. Inside pytest, `--perfsuite-gate` "
        "fails the run with code 1 on a regression and uses the usage-error code 4 for a baseline that "
        "is missing, corrupt, partial or cannot be compared, or when nothing was compared.",
        _table(["code", "name"], pytest_rows),
        "## `perfsuite verify --preflight`",
        "From `perfsuite/cli/preflight.py` (see the how-to *Run the GPU verification on a machine "
        "without network*).",
        _table(
            ["code", "meaning"],
            [
                ["0", "every preflight check passed or skipped"],
                ["1", "a preflight check failed"],
                [
                    str(preflight.NO_GPU_EXIT),
                    "no CUDA device (`torch.cuda.is_available()` is False): nothing checked",
                ],
            ],
        ),
    )


# ---------------------------------------------------------------- stored data


def _returned_dict_keys(function: Callable) -> list[str]:
    """The string keys of the dict literal ``function`` returns (read from its source)."""
    tree = ast.parse(inspect.getsource(function).lstrip())
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            return [key.value for key in node.value.keys if isinstance(key, ast.Constant)]
    raise RuntimeError(f"{function.__qualname__} returns no dict literal")


def _schema_versions(module) -> list[str]:
    return [
        f"`{name}` = {getattr(module, name)}"
        for name in sorted(vars(module))
        if name.endswith("SCHEMA_VERSION")
    ]


def schemas_page() -> str:
    """What a run stores: each benchmark's ``extra_info`` and ``run.json``'s result rows."""
    from perfsuite.report import results
    from perfsuite.suite import record

    extra = _returned_dict_keys(record.benchmark_extra_info)
    fields = [
        [f"`{f.name}`", _code(_cell(f.type))] for f in dataclasses.fields(results.BenchmarkResult)
    ]
    run_keys = _returned_dict_keys_in(results.write_run)
    return _join(
        GENERATED,
        "# Stored data",
        _notes("schemas"),
        "## A benchmark's `extra_info`",
        "Written by `perfsuite/suite/record.py` (`benchmark_extra_info`) into each benchmark of the "
        "pytest-benchmark baseline (`.benchmarks/<machine>/NNNN_<commit>_<date>.json`); "
        + ", ".join(_schema_versions(record))
        + ". Keys, in the order stored:",
        ", ".join(f"`{key}`" for key in extra),
        "## `run.json`",
        "Written by `perfsuite/report/results.py` (`write_run`), with the table, after every benchmark "
        "and at the end of a run; "
        + ", ".join(_schema_versions(results))
        + ". Top-level keys: "
        + ", ".join(f"`{key}`" for key in run_keys)
        + ". Each row of `results` holds the fields of "
        "`BenchmarkResult`:",
        _table(["field", "type"], fields),
    )


def _returned_dict_keys_in(function: Callable) -> list[str]:
    """The string keys of the first dict literal with string keys in ``function``'s source."""
    tree = ast.parse(inspect.getsource(function).lstrip())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Dict)
            and node.keys
            and all(isinstance(k, ast.Constant) for k in node.keys)
        ):
            return [key.value for key in node.keys]
    raise RuntimeError(f"{function.__qualname__} builds no dict literal")


def api_page() -> str:
    """The public API (``perfsuite.__all__``), one mkdocstrings block per name, grouped by module."""
    import perfsuite

    by_module: dict[str, list[str]] = {}
    for name, module in perfsuite._EXPORTS.items():
        by_module.setdefault(module, []).append(name)
    parts = [
        GENERATED,
        "# Public API",
        "Everything below is importable from `perfsuite` itself (`from perfsuite import register_variant`); "
        f"version `{perfsuite.__version__}`. Names resolve on first use, so `import perfsuite` stays cheap.",
    ]
    for module, names in by_module.items():
        parts.append(f"## `{module}`")
        parts += [
            f"::: {module}.{name}\n    options:\n      heading_level: 3" for name in sorted(names)
        ]
    return _join(*parts)


PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_page,
    "reference/pytest-options.md": pytest_options_page,
    "reference/configuration.md": configuration_page,
    "reference/columns.md": columns_page,
    "reference/case-sets.md": case_sets_page,
    "reference/variants.md": variants_page,
    "reference/kernel-families.md": kernel_families_page,
    "reference/exit-codes.md": exit_codes_page,
    "reference/schemas.md": schemas_page,
    "reference/api.md": api_page,
}


def portable(text: str) -> str:
    """``text`` without the facts of the machine that generated it: the interpreter's path (a default of
    ``perfsuite ab``) reads ``python``, the installed torch's version ``X.Y.Z``."""
    import sys
    from importlib import metadata

    text = text.replace(f"`{sys.executable}`", "`python`")
    try:
        torch = metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return text
    return text.replace(f"torch=={torch} ", "torch==X.Y.Z ")


def generated() -> dict[str, str]:
    """Every reference page, as committed under ``docs/`` (README and tutorials link them there)."""
    return {path: portable(make_page()) for path, make_page in PAGES.items()}


def write(docs: Path = HERE.parent) -> list[Path]:
    """Write every page of ``generated()`` under ``docs``; the paths written."""
    written = []
    for path, text in generated().items():
        target = docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":  # python docs/gen/reference.py: the committed pages made current
    for found in write():
        print(found)

"""``perfsuite ab``, ``compare`` and ``run`` resolve their configuration once (``suite.command_config``):
every value in one call with its source (command line, which file and key, or default), the
configuration file read once, a ref's committed configuration instead of the working tree's, and
errors that name the value and where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsuite.errors import UsageError
from perfsuite.gate.stats import SEPARATE_RUNS_MIN_EFFECT
from perfsuite.gate.worktrees import git_worktrees, ref_commits
from perfsuite.suite.command_config import (
    AbOptions,
    changed_gate_keys,
    resolve_ab,
    resolve_compare,
    saved_run_paths,
)
from perfsuite.suite.runner import find_project, read_config
from perfsuite.variants import registry
from validation.user_repo import UserRepo

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "chunked_attention" / "src"
CASE = "b1h2s512d32-fp32-causal-cpu"
PYPROJECT = f"""[tool.pytest.ini_options]
perfsuite_variants = "naive sdpa"
perfsuite_cases = "{CASE}"
perfsuite_modes = ["forward", "backward"]
"""


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    """User variants registered by a test are gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))


def resolve(cwd: Path, trees=None, commits=None, **options):
    return resolve_ab(
        AbOptions(**options), trees or {}, commits or {}, cwd=cwd, cuda_available=False
    )


def test_values_from_the_pyproject_are_resolved_with_file_and_key_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    config = resolve(tmp_path)
    assert (config.variants, config.case_ids, config.modes) == (
        ("naive", "sdpa"),
        (CASE,),
        ("forward", "backward"),
    )  # as perfsuite run times them
    pyproject = tmp_path.resolve() / "pyproject.toml"
    assert config.values["variants"].via == "perfsuite_variants"
    assert config.values["variants"].raw.origin == "ini"
    assert config.values["variants"].raw.source == (
        f"ini key perfsuite_variants='naive sdpa' from {pyproject} in the working tree"
    )
    assert config.values["modes"].raw.value == "forward backward"  # a TOML list, joined
    assert config.describe() == f"{pyproject} in the working tree"
    assert (config.base_tree, config.head_tree) == (tmp_path.resolve(), tmp_path.resolve())


def test_values_from_a_pytest_ini_name_its_key_and_file(tmp_path):
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nperfsuite_variants = sdpa\nperfsuite_modes = forward\n"
    )
    config = resolve(tmp_path)
    assert (config.variants, config.modes) == (("sdpa",), ("forward",))
    assert config.values["modes"].via == "perfsuite_modes"
    assert config.values["modes"].raw.source.endswith(
        f"from {tmp_path.resolve() / 'pytest.ini'} in the working tree"
    )


def test_the_command_line_beats_the_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    other = "b2h4s64d32-fp32-causal-cpu"
    config = resolve(tmp_path, variants="sdpa", modes="forward", cases=other, devices="cpu")
    assert (config.variants, config.modes, config.case_ids) == (("sdpa",), ("forward",), (other,))
    assert config.values["variants"].raw.source == "option --variants='sdpa'"
    assert {config.values[n].via for n in ("variants", "modes", "cases", "devices")} == {
        "--variants",
        "--modes",
        "--cases",
        "--devices",
    }
    head = resolve(tmp_path, head_variant="naive_inplace")
    assert head.variants == ("naive_inplace",) and head.values["variants"].via == "--head-variant"


def test_an_explicit_case_set_beats_the_configured_cases(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    config = resolve(tmp_path, case_set="smoke")
    assert CASE not in config.case_ids and config.case_ids
    assert config.values["cases"].via == "default"  # the configured cases are not read
    assert config.values["case_set"].raw.source == "option --case-set='smoke'"


def test_without_a_configuration_every_value_is_a_default(tmp_path):
    config = resolve(tmp_path)
    assert all(value.via == "default" for value in config.values.values()), config.values
    assert (
        config.values["case_set"].raw.source == "perfsuite ab's default perfsuite_case_set='smoke'"
    )
    assert config.values["modes"].raw.source == "built-in default perfsuite_modes='all'"
    assert config.values["case_set"].raw.value == "smoke"
    assert config.case_ids and all(
        c.endswith("-cpu") for c in config.case_ids
    )  # devices auto, no CUDA
    assert config.modes == ("forward", "backward", "forward_backward")
    assert config.history and config.history_url is None
    assert config.describe() == "no pytest configuration in the working tree: perfsuite's defaults"


def test_the_header_names_the_file_and_each_values_source(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        PYPROJECT
        + 'perfsuite_user_variants = ["chunked_attention.variant:chunked_attention"]\n'
        + 'perfsuite_history = "off"\n'
    )
    config = resolve(tmp_path, modes="forward")
    assert "chunked_attention" in registry.variant_names()  # loaded before any worker starts
    assert config.variant_specs == ("chunked_attention.variant:chunked_attention",)
    first, values = config.header_lines()
    assert (
        first
        == f"perfsuite ab: configuration: {tmp_path.resolve() / 'pyproject.toml'} in the working tree"
    )
    assert values == (
        "perfsuite ab: variants=naive,sdpa (perfsuite_variants); "
        "user variants=chunked_attention.variant:chunked_attention (perfsuite_user_variants); "
        f"cases={CASE} (perfsuite_cases); modes=forward (--modes); devices=auto (default); "
        "history=off (perfsuite_history)"
    )


def test_bad_values_name_where_they_came_from(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.replace('"forward", ', '"sideways", '))
    with pytest.raises(UsageError) as info:
        resolve(tmp_path)
    assert "ini key perfsuite_modes='sideways backward' from" in str(info.value)
    assert "pyproject.toml in the working tree" in str(info.value)
    with pytest.raises(UsageError, match="option --modes='sideways'"):
        resolve(tmp_path, modes="sideways")
    with pytest.raises(UsageError, match="variant spec 'nope' is not package.module:function"):
        resolve(tmp_path, variant=("nope",), modes="forward")
    with pytest.raises(UsageError, match="--base-tree '.*nowhere': no such folder"):
        resolve(tmp_path, modes="forward", base_tree=str(tmp_path / "nowhere"))


def test_the_configuration_file_is_read_once(tmp_path, monkeypatch):
    """Every value, the cases, the trees: one read of the pyproject (before: once per key, and more
    to find it)."""
    (tmp_path / "pyproject.toml").write_text(
        PYPROJECT + 'perfsuite_history_url = "h.sqlite"\nperfsuite_history = "on"\n'
    )
    reads: list[str] = []
    read_text = Path.read_text

    def counted(self, *args, **kwargs):
        reads.append(self.name)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    config = resolve(tmp_path)
    assert config.history_url == "h.sqlite" and config.case_ids == (CASE,)
    assert reads.count("pyproject.toml") == 1, reads
    reads.clear()
    project = find_project(tmp_path)  # perfsuite run: the root and the file pytest is given
    assert project.config_path == tmp_path.resolve() / "pyproject.toml"
    assert project.describe() == "its pyproject.toml has perfsuite keys"
    assert reads.count("pyproject.toml") == 1, reads


@pytest.fixture
def two_commits(tmp_path, monkeypatch):
    """A repository whose configuration lives in ``sub/``: the base commit gates naive, the head
    commit sdpa, and the working tree (uncommitted) naive_inplace; ab runs from ``sub/deeper``."""
    sub = tmp_path / "sub"
    config = PYPROJECT.replace("naive sdpa", "{}")
    repo = UserRepo.init(tmp_path, {"sub/deeper/keep": ""})
    base = repo.commit("base", {"sub/pyproject.toml": config.format("naive")})
    head = repo.commit("head: gates sdpa only", {"sub/pyproject.toml": config.format("sdpa")})
    pyproject = sub / "pyproject.toml"
    pyproject.write_text(PYPROJECT.replace("naive sdpa", "naive_inplace"))
    monkeypatch.chdir(sub / "deeper")
    return sub, base, head


def test_a_base_ref_is_gated_with_its_committed_configuration(two_commits):
    sub, base, head = two_commits
    working = resolve(Path.cwd())
    assert working.variants == ("naive_inplace",)  # without refs: the working tree's
    assert working.project.root == sub.resolve()
    refs = {"base": base, "head": None}
    commits, _ = ref_commits(refs)
    with git_worktrees(refs) as trees:
        config = resolve(Path.cwd(), trees, commits, base_ref=base)
        assert config.project.root == trees["base"].resolve() / "sub"  # the same subdirectory
        assert config.base_tree == trees["base"]
    assert config.variants == ("naive",) and config.changed_keys == ()
    assert config.describe() == f"sub/pyproject.toml at --base-ref {base} ({base[:9]})"
    assert config.values["variants"].raw.source == (
        f"ini key perfsuite_variants='naive' from sub/pyproject.toml at --base-ref {base} ({base[:9]})"
    )
    assert (
        config.head_tree == sub.resolve()
    )  # the head is the working tree, not the base's worktree


def test_a_head_ref_that_changes_what_is_gated_is_named(two_commits):
    sub, base, head = two_commits
    refs = {"base": base, "head": head}
    commits, _ = ref_commits(refs)
    with git_worktrees(refs) as trees:
        config = resolve(Path.cwd(), trees, commits, base_ref=base, head_ref=head)
        assert (config.base_tree, config.head_tree) == (trees["base"], trees["head"])
    assert config.variants == ("naive",)  # the base ref's, not the head's
    assert config.changed_keys == ("perfsuite_variants",)
    assert config.header_lines()[-1] == (
        "perfsuite ab: note: the head ref changes perfsuite_variants; the gate uses the base "
        "ref's configuration, so the change is gated on what main gates"
    )
    with git_worktrees({"head": head}) as trees:  # only a head ref: the head's configuration
        only_head = resolve(Path.cwd(), trees, {"head": head[:9]}, head_ref=head)
        assert only_head.head_tree == trees["head"]
    assert (
        only_head.variants == ("sdpa",) and only_head.where == f"at --head-ref {head} ({head[:9]})"
    )
    assert only_head.base_tree == sub.resolve()


def test_a_head_that_drops_its_own_variant_from_the_gate_is_named(tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    text = (
        "[tool.pytest.ini_options]\n"
        'perfsuite_user_variants = ["myattn.attention:blocked_attention"]\n'
        'perfsuite_variants = "blocked_attention sdpa"\nperfsuite_case_set = "smoke"\n'
    )
    (base / "pyproject.toml").write_text(text)
    (head / "pyproject.toml").write_text(text.replace('"blocked_attention sdpa"', '"sdpa"'))
    assert changed_gate_keys(read_config(base), read_config(head)) == ["perfsuite_variants"]
    (head / "pyproject.toml").write_text(text + "# a comment only\n")
    assert changed_gate_keys(read_config(base), read_config(head)) == []
    assert changed_gate_keys(read_config(base), None) == [
        "perfsuite_variants",
        "perfsuite_user_variants",
        "perfsuite_case_set",
    ]


def test_compare_resolves_its_minimum_effect_and_saved_runs_once(tmp_path, monkeypatch):
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    for name in ("0001_abc_20261201_000000.json", "0002_abc_20261201_000100.json"):
        (saved / name).write_text("{}")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "sub").mkdir()
    finds = []
    monkeypatch.setattr(
        "perfsuite.suite.command_config.find_project",
        lambda start: finds.append(start) or find_project(start),
    )
    config = resolve_compare("0001", "0002", 0.01, None, cwd=tmp_path / "sub")
    assert (Path(config.base).name, Path(config.head).name) == (
        "0001_abc_20261201_000000.json",
        "0002_abc_20261201_000100.json",
    )
    assert len(finds) == 1  # one project for both numbers
    assert (
        config.settings.min_effect == SEPARATE_RUNS_MIN_EFFECT
        and config.min_effect.via == "default"
    )
    given = resolve_compare(
        str(saved / "0001_abc_20261201_000000.json"), "0002", 0.05, 0.02, cwd=tmp_path
    )
    assert given.settings.min_effect == 0.02 and given.min_effect.via == "--min-effect"
    assert given.settings.alpha == 0.05
    with pytest.raises(
        UsageError, match="saved run '0009': none in .*saved runs there: 0001, 0002"
    ):
        saved_run_paths(["0009"], cwd=tmp_path)


def test_the_configured_dtypes_and_masks_refine_abs_case_set_as_they_refine_run(tmp_path):
    """``perfsuite_dtypes = fp32`` in the user's configuration: ab gates the fp32 cases of its case
    set only, as perfsuite run times them (it gated bf16 too, twice the time, silently)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nperfsuite_case_set = "gqa"\nperfsuite_dtypes = "fp32"\n'
    )
    config = resolve(tmp_path)
    assert config.case_ids and all("-fp32-" in case for case in config.case_ids), config.case_ids
    assert config.values["dtypes"].via == "perfsuite_dtypes"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "pyproject.toml").write_text('[tool.pytest.ini_options]\nperfsuite_case_set = "gqa"\n')
    assert any("-fp32-" not in case for case in resolve(plain).case_ids)  # the set has other dtypes


def test_ab_binds_a_variant_entrys_function_to_its_case_sets(tmp_path, monkeypatch):
    """A ``perfsuite_user_variants`` entry with ``case_sets=``: ab gates the function on those sets'
    cases, the other variants on the configured ones, and its header shows the entry whole."""
    from perfsuite.variants import user

    monkeypatch.setattr(user, "_BOUND_BY_ENTRY", {})
    entry = "chunked_attention.variant:chunked_attention case_sets=gqa"
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + f'perfsuite_user_variants = ["{entry}"]\n')
    config = resolve(tmp_path, variants="naive chunked_attention", modes="forward")
    assert config.variant_specs == (entry,)
    gqa = resolve(tmp_path, case_set="gqa", variants="naive").case_ids
    assert config.variant_case_ids["chunked_attention"] == gqa
    assert config.case_ids == (CASE,)
    assert f"user variants={entry} (perfsuite_user_variants)" in config.header_lines()[1]

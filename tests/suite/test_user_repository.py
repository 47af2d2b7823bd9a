"""perfsuite in a user's own repository, end to end, as README's "Use it in your repository" and the getting-started tutorial say.

A throwaway git repository with a small attention package (src layout), a base commit and a head
commit that adds one extra score-sized copy per forward; perfsuite is installed into the
repository's own virtualenv (a non-editable install, so the shipped suite and templates are what
runs). torch, pytest, pip, setuptools and the other dependencies come from this test's
environment through a ``.pth`` file instead of a 700 MB reinstall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.gate.noise_floor import FLOOR_MIN_WORKER_PAIRS, between_pairs_sd
from perfsuite.units import format_bytes
from validation.user_repo import CHECKOUT, UserRepo

pytestmark = pytest.mark.slow

CASE = "b1h2s16d8-fp32-causal-cpu"
ATTENTION = '''"""Plain softmax attention over the whole score matrix."""
import torch


def blocked_attention(query, key, value, *, mask, scale):
    """Softmax attention; a query that sees no key gives zeros."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.additive is not None:
        scores.add_(mask.additive)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, value)
'''
PYPROJECT = f'''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "myattn"
version = "0.1.0"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn.attention:blocked_attention"]
perfsuite_variants = "blocked_attention sdpa"
perfsuite_cases = "{CASE}"
perfsuite_modes = ["forward", "backward"]
'''
# a backward-only slowdown: activation checkpointing recomputes the forward inside backward
CHECKPOINTED = (
    ATTENTION.replace(
        '"""Plain softmax attention over the whole score matrix."""\nimport torch\n',
        '''"""Checkpointed."""
import torch
from torch.utils.checkpoint import checkpoint
''',
    ).replace("def blocked_attention(", "def _attention(")
    + '''

def blocked_attention(query, key, value, *, mask, scale):
    """The same attention, recomputed in backward."""
    return checkpoint(lambda q, k, v: _attention(q, k, v, mask=mask, scale=scale), query, key, value,
                      use_reentrant=False)
'''
)
# README's plain form: structure that adds work fails by default (--blocks 2: structure only)
AB = ("ab", "--cases", CASE, "--blocks", "2", "--rounds", "1")  # + refs
EXTRA_COPY = "    scores = scores.transpose(-2, -1).contiguous().transpose(-2, -1)  # one extra score-sized copy\n"


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory):
    head = ATTENTION.replace("    if mask.additive", EXTRA_COPY + "    if mask.additive", 1)
    repo = UserRepo.init(
        tmp_path_factory.mktemp("myrepo"),
        {
            "src/myattn/__init__.py": "",
            "pyproject.toml": PYPROJECT,
            ".gitignore": ".venv/\n.benchmarks/\nperfsuite-results/\n*.egg-info/\n__pycache__/\n",
        },
    )
    attention_py = "src/myattn/attention.py"
    base_sha = repo.commit("base", {attention_py: ATTENTION})
    head_sha = repo.commit("head: an extra copy of the scores", {attention_py: head})
    repo.git("checkout", "-q", base_sha)
    slow_backward_sha = repo.commit(
        "checkpointed: backward recomputes the forward", {attention_py: CHECKPOINTED}
    )
    repo.git("checkout", "-q", base_sha)  # the suite runs on the base first
    repo.install_perfsuite(".")
    return repo, base_sha, head_sha, slow_backward_sha


def test_the_suite_runs_in_the_users_repository_with_their_config(user_repo):
    repo, base_sha, head_sha, _ = user_repo
    result = repo.perfsuite(
        "run",
        "--benchmark-min-rounds=2",
        "--benchmark-max-time=0.001",
        "--benchmark-warmup=off",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert (
        "perfsuite: variants=blocked_attention,sdpa (perfsuite_variants) modes=forward,backward "
        "(perfsuite_modes)" in output
    )  # each value with the key that set it
    assert "perfsuite: attention at a glance" in output
    assert (
        str(CHECKOUT)
        not in output.split("perfsuite: attention at a glance")[0]
        .split("rootdir:")[1]
        .splitlines()[0]
    )
    saved = list((repo.path / ".benchmarks").rglob("0001_*.json"))
    assert len(saved) == 1 and saved[0].name.startswith(f"0001_{base_sha}"), (
        saved
    )  # named by the user's commit
    names = [b["fullname"] for b in json.loads(saved[0].read_text())["benchmarks"]]
    # named by the suite file's path under the repository (here inside its .venv), never "::test_benchmark[...]"
    assert names and all(
        n.split("::")[0].endswith("perfsuite/suite/test_attention.py") for n in names
    ), names[:1]
    rows = json.loads((repo.path / "perfsuite-results" / "run.json").read_text())["results"]
    assert {(r["variant"], r["mode"]) for r in rows} == {
        (v, m) for v in ("blocked_attention", "sdpa") for m in ("forward", "backward")
    }


def test_run_from_a_subdirectory_uses_the_repositorys_configuration(user_repo):
    """``cd src && perfsuite run --check`` runs the user's variants, not the built-in ones, and
    leaves no empty ``.benchmarks/`` (pytest-benchmark makes one even when timing is off)."""
    repo, *_ = user_repo
    saved = repo.path / ".benchmarks"
    aside = repo.path / ".benchmarks-aside"
    if saved.exists():
        saved.rename(aside)
    try:
        result = repo.perfsuite(
            "run",
            "--check",
            "-k",
            "blocked_attention and forward",
            cwd=repo.path / "src",
        )
        assert not saved.exists()
    finally:
        if aside.exists():
            aside.rename(saved)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"perfsuite run: running in {repo.path.resolve()}" in output
    assert "perfsuite: variants=blocked_attention,sdpa" in output
    assert not (repo.path / "src" / "perfsuite-results").exists()


def test_plain_pytest_with_perfsuite_options_says_what_to_do(user_repo):
    repo, *_ = user_repo
    result = repo.sh(
        repo.bin / "python",
        "-m",
        "pytest",
        "--perfsuite-variants=sdpa",
        check=False,
    )
    assert "perfsuite run" in result.stdout, result.stdout


def test_plain_pytest_runs_the_users_own_tests_and_exits_by_their_outcome(user_repo):
    """With perfsuite's keys in ``[tool.pytest.ini_options]`` (and no ``--perfsuite-*`` option), plain
    ``pytest`` runs the repository's own tests and exits by them: no usage error about variants that
    have no suite test, no note about reasons that were never printed."""
    repo, *_ = user_repo
    own = repo.path / "tests" / "test_own.py"
    own.parent.mkdir(exist_ok=True)
    own.write_text(
        "def test_mine():\n    assert 1 + 1 == 2\n\n\n"
        "def test_mine_broken():\n    assert 1 + 1 == 3\n"
    )
    try:
        passing = repo.sh(
            repo.bin / "python", "-m", "pytest", "-q", "tests/test_own.py::test_mine", check=False
        )
        everything = repo.sh(repo.bin / "python", "-m", "pytest", "-q", check=False)
    finally:
        own.unlink()
    output = passing.stdout + passing.stderr
    assert passing.returncode == 0, output
    assert "1 passed" in output and "has no test on these cases" not in output, output
    output = everything.stdout + everything.stderr
    assert everything.returncode == 1, output  # the user's own failing test, not a usage error
    assert "1 failed, 1 passed" in output and "reasons are above" not in output, output


def test_the_table_counts_the_users_kv_expansion_copies_by_kind(user_repo):
    """The user's GQA by ``repeat_interleave`` copies the keys and the values once each per forward:
    the table's copy column counts them as K/V copies with their bytes, not only score copies."""
    repo, *_ = user_repo
    gqa = "b1h4kv2s16d8-fp32-causal-cpu"
    result = repo.perfsuite(
        "run",
        "--check",
        "--perfsuite-cases",
        gqa,
        "--perfsuite-variants",
        "blocked_attention",
        "--perfsuite-modes",
        "forward",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    table = (repo.path / "perfsuite-results" / "table.md").read_text()
    header, _, row = table.splitlines()[:3]
    cell = row.split(" | ")[header.split(" | ").index("copies / step by kind (bytes)")]
    expanded = 1 * 4 * 16 * 8 * 4  # [B, H, Skv, D] fp32, keys and values: 2.0 KiB each
    assert cell == f"score 0 · K/V 2 ({format_bytes(2 * expanded)}) · cast 0", table
    (rows,) = json.loads((repo.path / "perfsuite-results" / "run.json").read_text())["results"]
    assert rows["copies_by_kind"]["K/V"] == {"count": 2, "bytes": 2 * expanded}


def test_a_variant_entry_binds_the_users_function_to_its_models_case_sets(user_repo):
    """``perfsuite_user_variants = ["myattn.attention:blocked_attention case_sets=..."]``: the
    function runs those sets' cases, the header says which entry bound it to which sets, and a bad
    set is refused naming it and the known ones."""
    repo, *_ = user_repo
    pyproject = repo.path / "pyproject.toml"
    written = pyproject.read_text()
    plain = 'perfsuite_user_variants = ["myattn.attention:blocked_attention"]'
    entry = "myattn.attention:blocked_attention case_sets=model-llama-3-8b,gqa"
    try:
        pyproject.write_text(written.replace(plain, f'perfsuite_user_variants = ["{entry}"]'))
        listed = repo.perfsuite("run", "--check", "--collect-only")
        pyproject.write_text(written.replace(plain, f'perfsuite_user_variants = ["{entry}q"]'))
        refused = repo.perfsuite("run", "--check", "--collect-only")
    finally:
        pyproject.write_text(written)
    output = listed.stdout + listed.stderr
    assert listed.returncode == 0, output
    own = [line for line in output.splitlines() if "blocked_attention runs its case sets" in line]
    assert own and own[0].startswith(
        f"perfsuite: blocked_attention runs its case sets model-llama-3-8b gqa (variant entry {entry!r}): "
        "b1h32kv8s256d128-fp32-causal_br-cpu"
    ), output
    bound_ids = own[0].rpartition("): ")[2].split()
    collected = [line for line in output.splitlines() if "test_benchmark[" in line]
    ours = [line for line in collected if "blocked_attention" in line]
    assert ours and all(any(i in line for i in bound_ids) for line in ours), collected
    assert not any(CASE in line for line in ours), (
        collected
    )  # the model's cases, not perfsuite_cases
    assert any("sdpa" in line and CASE in line for line in collected), collected
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "case set 'gqaq' is unknown (did you mean 'gqa'?); known: smoke, default" in output, (
        output
    )
    assert f"ini key perfsuite_user_variants from {pyproject}: variant entry" in output, output


def test_the_ab_gate_on_git_refs_names_the_extra_copy_and_fails(user_repo):
    repo, base_sha, head_sha, _ = user_repo
    result = repo.perfsuite(*AB, "--base-ref", base_sha, "--head-ref", head_sha)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "FAIL `blocked_attention/b1h2s16d8-fp32-causal-cpu: structure adds work:" in output
    assert "copy cpu aten::clone [1x2x16x16]" in output
    assert (
        "blocked_attention/b1h2s16d8-fp32-causal-cpu/backward" in output
    )  # every mode is gated by default
    assert "perfsuite gate: FAIL" in output and "decided by structure" in output
    assert not list(repo.path.glob("perfsuite-ab-*")) and "perfsuite-ab-" not in repo.git(
        "worktree", "list"
    )

    same = repo.perfsuite(
        *AB,
        "--base-ref",
        head_sha,
        "--head-ref",
        head_sha,
        "--variants",
        "blocked_attention",
        "--modes",
        "forward",
    )
    assert same.returncode == 0, same.stdout + same.stderr
    assert "perfsuite gate: PASS" in same.stdout


def test_an_a_a_gate_recorded_in_the_history_sets_the_next_gates_noise_floor(user_repo):
    """The nightly A/A gate's spread between worker pairs is kept in the history store, and the next gate
    on this machine reads it without a --noise-floor file (six worker pairs a side: the fewest whose
    spread is kept)."""
    repo, base_sha, _, _ = user_repo
    timed = ("ab", "--cases", CASE, "--variants", "blocked_attention", "--modes", "forward")
    timed += ("--workers-per-side", "6", "--blocks", "4", "--rounds", "1", "--budget-s", "2")
    night_json = repo.path.parent / "aa-night.json"
    night = repo.perfsuite(
        *timed, "--base-ref", base_sha, "--head-ref", base_sha, "--json", night_json
    )
    assert night.returncode == 0, night.stdout + night.stderr
    assert "history: recorded 2 runs of 1 benchmark(s) each" in night.stderr, night.stderr
    assert " of 6 worker pairs, " in night.stderr, night.stderr  # a look's progress line
    day = repo.perfsuite(*timed, "--base-ref", base_sha, "--head-ref", base_sha)
    assert day.returncode == 0, day.stdout + day.stderr
    (benchmark,) = json.loads(night_json.read_text())["benchmarks"]
    # a loaded machine may have set every block of worker pairs aside: then no spread kept, no floor read
    if benchmark["between_pairs_sd"] is None:
        assert between_pairs_sd(benchmark, FLOOR_MIN_WORKER_PAIRS) is None
        assert "kept in the history" not in night.stderr, night.stderr
        assert "noise floor: the A/A gates recorded in" not in day.stderr, day.stderr
    else:
        assert "this A/A gate's spread between worker pairs is kept in the history for 1" in (
            night.stderr
        ), night.stderr
        assert "noise floor: the A/A gates recorded in" in day.stderr, day.stderr
        assert "set it for 1 benchmark(s)" in day.stderr, day.stderr


def test_the_workflow_template_is_written_once_and_lints(user_repo, tmp_path):
    repo, *_ = user_repo
    output = tmp_path / "perfsuite-gate.yml"
    requirement = "git+https://github.com/example/perfsuite@v0.1.0"
    assert repo.perfsuite("init-ci", "--output", output, "--perfsuite", requirement).returncode == 0
    again = repo.perfsuite("init-ci", "--output", output, "--perfsuite", requirement)
    assert again.returncode == 2 and "use --force" in again.stderr
    text = output.read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert "pull_request_target" not in code and "permissions:\n  contents: read" in text
    assert (
        '--base-ref "$BASE_SHA" --head-ref "$HEAD_SHA"' in text
        and f"pip install '{requirement}'" in text
    )
    import torch  # the runner installs the torch the user has, and gates the user's configured case set

    assert (
        f"pip install torch=={torch.__version__.split('+')[0]} --index-url" in text
        and "--case-set" not in text
    )
    bin_dir = Path(sys.executable).parent
    lint = subprocess.run([bin_dir / "actionlint", str(output)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    zizmor = subprocess.run(
        [bin_dir / "zizmor", "--offline", "--no-progress", str(output)],
        capture_output=True,
        text=True,
    )
    assert zizmor.returncode == 0 and "No findings" in zizmor.stdout + zizmor.stderr, (
        zizmor.stdout + zizmor.stderr
    )


def test_a_backward_only_slowdown_is_caught_in_backward_mode(user_repo):
    repo, base_sha, _, slow_backward_sha = user_repo
    result = repo.perfsuite(
        *AB,
        "--variants",
        "blocked_attention",
        "--base-ref",
        base_sha,
        "--head-ref",
        slow_backward_sha,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    failing = [line for line in output.splitlines() if line.startswith("- FAIL")]
    assert any(
        "/backward: structure adds work" in line and "aten::bmm" in line for line in failing
    ), failing


def test_ab_on_two_refs_reads_their_configuration_not_the_working_trees(user_repo):
    """An uncommitted edit of pyproject.toml is not what two committed refs are gated with: ab uses the base ref's configuration and says so."""
    repo, base_sha, head_sha, _ = user_repo
    pyproject = repo.path / "pyproject.toml"
    committed = pyproject.read_text()
    pyproject.write_text(
        committed.replace(
            'perfsuite_variants = "blocked_attention sdpa"', 'perfsuite_variants = "sdpa"'
        )
    )
    try:
        result = repo.perfsuite(
            *AB,
            "--modes",
            "forward",
            "--base-ref",
            base_sha,
            "--head-ref",
            head_sha,
        )
    finally:
        pyproject.write_text(committed)
    output = result.stdout + result.stderr
    assert result.returncode == 1, (
        output
    )  # the committed variants: blocked_attention's extra copy is gated
    assert (
        f"perfsuite ab: configuration: pyproject.toml at --base-ref {base_sha} ({base_sha[:9]})"
        in output
    )
    assert "blocked_attention/b1h2s16d8-fp32-causal-cpu" in output


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_ctrl_c_and_sigterm_end_ab_with_one_line_and_remove_the_worktrees(user_repo, how):
    """Ctrl-C (SIGINT to the terminal's process group) and SIGTERM (what CI sends on a timeout)."""
    import signal

    repo, base_sha, head_sha, _ = user_repo
    command = [
        str(repo.bin / "perfsuite"),
        "ab",
        "--cases",
        CASE,
        "--blocks",
        "400",
        "--rounds",
        "5",
        "--workers-per-side",
        "2",
        "--base-ref",
        base_sha,
        "--head-ref",
        head_sha,
    ]
    process = subprocess.Popen(
        command,
        cwd=repo.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as from a terminal, even where this test runs in a background job (SIGINT ignored there)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    for line in process.stderr:  # progress: a benchmark set up in both trees, its timing under way
        seen.append(line)
        if line.startswith("A/B "):
            break
    assert seen and seen[-1].startswith("A/B "), "".join(seen)
    assert "perfsuite-ab-" in repo.git("worktree", "list")
    os.killpg(process.pid, signal.SIGINT) if how == "SIGINT" else process.send_signal(
        signal.SIGTERM
    )
    out, err = process.communicate(timeout=120)
    assert process.returncode == (130 if how == "SIGINT" else 143), err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("perfsuite ab: "), err
    assert ("interrupted (Ctrl-C)" if how == "SIGINT" else "terminated (SIGTERM)") in err
    assert "perfsuite-ab-" not in repo.git("worktree", "list")


def test_an_alibi_attention_passes_every_check_and_an_old_signature_is_not_generated(user_repo):
    """The ALiBi example of add-your-attention.md (per-head slopes, causality from the query positions)
    on GQA decode and chunked-prefill cases passes `perfsuite run --check` (reference in forward and
    backward, properties); the repository's old-signature blocked_attention is not generated there,
    and the run says why."""
    from tests.test_docs import DOCS

    repo, *_ = user_repo
    page = (DOCS / "how-to" / "add-your-attention.md").read_text()
    example = page.split("## Score modifications", 1)[1].split("```python\n", 1)[1].split("```")[0]
    alibi_py = repo.path / "src" / "myattn" / "alibi.py"
    alibi_py.write_text(example)
    cases = "b1h4kv2q1k16d8-fp32-causal_br-alibi-cpu,b2h4kv1q3k12d8-fp32-causal_br-alibi-cpu"
    try:
        result = repo.perfsuite(
            "run",
            "--check",
            "--perfsuite-variant",
            "myattn.alibi:alibi_attention",
            "--perfsuite-variants",
            "alibi_attention,blocked_attention",
            "--perfsuite-cases",
            cases,
            "--perfsuite-isolate",
            "none",  # the crash probe's child process is not a check (5 s)
        )
    finally:
        alibi_py.unlink()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = output.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, output
    assert "blocked_attention does not declare alibi (" in output, output
    assert "your variant blocked_attention has no test on these cases" in output
    assert "your variant alibi_attention" not in output


SERVING = Path(__file__).parent.parent / "data" / "serving_attention.py"
SERVING_CASES = (
    "b2h4kv2q1k12d8-fp32-causal_br-paged4-uniform-cpu b2h4kv2s12d8-fp32-causal-packed-uniform-cpu"
)


def test_a_serving_engineers_paged_decode_and_varlen_prefill_pass_the_check(user_repo):
    """A paged-decode and a varlen-prefill function, each declaring its form by its keywords, pass
    ``perfsuite run --check`` on a paged and a packed case; each is not generated on the other's case."""
    repo, *_ = user_repo
    serving = repo.path / "src" / "myattn" / "serving.py"
    serving.write_text(SERVING.read_text())
    try:
        result = repo.perfsuite(
            "run",
            "--check",
            "-v",
            "--perfsuite-variant=myattn.serving:paged_decode",
            "--perfsuite-variant=myattn.serving:varlen_prefill",
            "--perfsuite-variants=paged_decode,varlen_prefill",
            f"--perfsuite-cases={SERVING_CASES}",
            "--perfsuite-modes=forward",
            "--perfsuite-isolate=none",
        )
    finally:
        serving.unlink()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for variant, case in zip(("paged_decode", "varlen_prefill"), SERVING_CASES.split()):
        assert f"test_matches_float64_reference[{variant}-{case}-forward] PASSED" in output, output
        assert f"test_property[{variant}-{case}-sequence_independence] PASSED" in output, output
        assert f"test_score_accounting_per_step[{variant}-{case}] PASSED" in output, output
    assert "paged_decode does not declare varlen" in output


def check_failing_module(
    repo, module: str, source: str, function: str, *options: str
) -> tuple[str, list[str]]:
    """``perfsuite run --check`` (forward, not isolated) on ``function`` of a module ``myattn.<module>``
    written from ``source`` for this run only; asserts it failed (exit 1) and returns its output and
    its ``FAILED`` lines."""
    path = repo.path / "src" / "myattn" / f"{module}.py"
    path.write_text(source)
    try:
        result = repo.perfsuite(
            "run",
            "--check",
            f"--perfsuite-variant=myattn.{module}:{function}",
            f"--perfsuite-variants={function}",
            *options,
            "--perfsuite-modes=forward",
            "--perfsuite-isolate=none",
        )
    finally:
        path.unlink()
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    return output, [line for line in output.splitlines() if line.startswith("FAILED ")]


def test_one_extra_score_copy_is_explained_once_and_referred_to_by_the_other_checks(user_repo):
    """An out-of-place ``masked_fill`` in a function declared in place (no copy declared) is one
    mistake: of the three checks that count it (copies per step, score accounting, the
    ``score_copies`` property) the first to fail names the copy and where it is made, the other two
    skip, referring to it in one line: one FAILED. Before: three full failures, none naming
    ``masked_fill``; then three FAILED, two of them one-line references."""
    repo, *_ = user_repo
    source = ATTENTION.replace("def blocked_attention(", "def copying_attention(").replace(
        'scores.masked_fill_(mask.masked_out, float("-inf"))',
        'scores = scores.masked_fill(mask.masked_out, float("-inf"))',
    )
    output, failed = check_failing_module(repo, "copying", source, "copying_attention")
    assert len(failed) == 1, output
    named = (
        f"copying_attention on {CASE}: 1 extra copy of the score matrix per forward: copy "
        f"[1x2x16x16] in aten::masked_fill > aten::clone > aten::copy_"
    )
    referred = "fails too; this case's score copies are already reported: "
    # in full once, in the failure's body (pytest's short summary line repeats its start, cut to the
    # terminal's width or not, so it is left out of the count)
    explained = [
        line
        for line in output.splitlines()
        if named in line and referred not in line and not line.startswith("FAILED ")
    ]
    assert len(explained) == 1 and "register_variant(" in explained[0], output
    skipped = [
        line
        for line in output.splitlines()
        if line.startswith("SKIPPED")
        and referred + "copying_attention on " + CASE + ": 1 extra copy" in line
    ]
    assert len(skipped) == 2, output


ONLINE_VARLEN = '''"""Varlen prefill with an online softmax over chunks of 4 keys, its merge without the max correction."""
import torch


def online_prefill(
    query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
):
    heads, groups = query.shape[1], query.shape[1] // key.shape[1]
    out = query.new_empty(query.shape[0], heads, value.shape[-1])
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1])
        q = query[q0:q1].transpose(0, 1)
        k, v = (t[k0:k1].transpose(0, 1).repeat_interleave(groups, 0) for t in (key, value))
        rows = torch.arange(q1 - q0)[:, None] + (k1 - k0) - (q1 - q0)
        top = query.new_full((heads, q1 - q0, 1), float("-inf"))
        total = query.new_zeros(heads, q1 - q0, 1)
        acc = query.new_zeros(heads, q1 - q0, value.shape[-1])
        for start in range(0, k1 - k0, 4):
            cols = torch.arange(start, min(start + 4, k1 - k0))
            scores = (q @ k[:, cols].transpose(-2, -1) * scale).masked_fill(cols > rows, float("-inf"))
            top = torch.maximum(top, scores.amax(-1, keepdim=True))  # no rescale of total and acc
            weights = torch.exp(scores - top.clamp(min=-1e30))
            total = total + weights.sum(-1, keepdim=True)
            acc = acc + weights @ v[:, cols]
        out[q0:q1] = (acc / total).transpose(0, 1)
    return out
'''


def test_a_packed_online_softmax_without_the_max_correction_gets_the_hint(user_repo):
    """Before: a packed (varlen) case had no rerun to say the merge is wrong, only the element."""
    repo, *_ = user_repo
    module = repo.path / "src" / "myattn" / "online.py"
    module.write_text(ONLINE_VARLEN)
    try:
        result = repo.perfsuite(
            "run",
            "--check",
            "-k",
            "test_matches_float64_reference",
            "--perfsuite-variant=myattn.online:online_prefill",
            "--perfsuite-variants=online_prefill",
            "--perfsuite-cases=b3h4kv2s24d8-fp32-causal_br-packed-uniform-cpu",
            "--perfsuite-modes=forward",
            "--perfsuite-isolate=none",
        )
    finally:
        module.unlink()
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert (
        "with scores that fall along each sequence's keys (the first key a row's max) the output "
        "matches the reference, with the same scores rising along the keys it does not: the merge "
        "across chunks of keys is wrong (is the max / log-sum-exp correction applied?" in output
    ), output


GEMMA_WINDOW = '''"""Gemma-2 style attention: softcap, sliding window, grouped-query heads; the window one key too wide."""
import torch


def gemma_attention(query, key, value, *, mask, scale, softcap):
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = softcap * torch.tanh(torch.matmul(query, key.transpose(-2, -1)) * scale / softcap)
    if mask.additive is not None:
        scores = scores + mask.additive
    window = int(mask.kind.removeprefix("window"))
    rows = torch.arange(query.shape[2])[:, None] + key.shape[2] - query.shape[2]
    distance = rows - torch.arange(key.shape[2])[None, :]
    hidden = (distance < 0) | (distance > window)  # the mistake: each query sees window + 1 keys
    return torch.matmul(torch.softmax(scores.masked_fill_(hidden, float("-inf")), dim=-1), value)
'''
WINDOW_CASE = "b1h4kv2s16d8-fp32-window4-softcap50-cpu"


def test_a_window_off_by_one_fails_once_per_case_its_first_line_naming_the_window(user_repo):
    """A user's Gemma-style function whose window is one key too wide: exactly one FAILED on the case,
    whose first line (the short summary's) names the window, not the tolerance; the probe, the
    properties and the benchmark skip, referring to it. Before: 3-4 FAILED on the case, each first
    line ``not within atol=..., rtol=... of the float64 reference; worst element ...``."""
    repo, *_ = user_repo
    output, failed = check_failing_module(
        repo, "gemma", GEMMA_WINDOW, "gemma_attention", f"--perfsuite-cases={WINDOW_CASE}"
    )
    assert len(failed) == 1 and "test_matches_float64_reference[gemma_attention-" in failed[0], (
        output
    )
    [first] = [
        line.split("AssertionError: ", 1)[1]
        for line in output.splitlines()
        if line.startswith("E ")
        and f"AssertionError: variant gemma_attention on case {WINDOW_CASE}" in line
    ]
    assert first.startswith(
        f"variant gemma_attention on case {WINDOW_CASE} (seed 0): the output matches the reference with "
        "a window of 5 keys, not 4"
    ), output
    referring = [
        line
        for line in output.splitlines()
        if line.startswith("SKIPPED") and "the output is already wrong on this case: " in line
    ]
    assert len(referring) >= 2, output
    assert all("test_matches_float64_reference[gemma_attention-" in line for line in referring), (
        output
    )

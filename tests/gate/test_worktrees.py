"""Git refs as A/B sides: commit ids for the title, and notes when a ref cannot show what the user changed."""

import pytest

from perfsuite.errors import UsageError
from perfsuite.gate.worktrees import describe_tree, git_worktrees, ref_commits
from validation.user_repo import UserRepo


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = UserRepo.init(tmp_path)
    repo.commit("base", {"attention.py": "scores.masked_fill_(mask, 0)\n"})
    monkeypatch.chdir(tmp_path)
    return repo


def test_refs_are_named_by_commit_and_one_commit_on_both_sides_is_called_an_a_a_gate(repo):
    commits, notes = ref_commits({"base": "main", "head": "HEAD"})
    commit = repo.git("rev-parse", "HEAD")[:9]
    assert commits == {"base": commit, "head": commit}
    assert notes == [f"base and head are the same commit ({commits['base']}): this is an A/A gate"]


def test_uncommitted_changes_are_pointed_out_with_the_option_that_gates_them(repo):
    (repo.path / "attention.py").write_text("scores = scores.masked_fill(mask, 0)\n")
    _, notes = ref_commits({"base": "main", "head": "HEAD"})
    assert (
        "--head-ref HEAD is the checked-out commit, and your uncommitted changes are not in it; commit them, "
        "or gate them as they are with --head-tree . instead of --head-ref" in notes
    )
    assert not any("--base-ref" in note for note in notes)
    assert (
        ref_commits({"base": "main", "head": None})[1] == []
    )  # --base-ref main --head-tree .: the changes are gated


def test_a_committed_change_needs_no_note_and_a_bad_ref_is_a_usage_error(repo):
    repo.git("checkout", "-qb", "feature")
    repo.commit("head", {"attention.py": "scores = scores.masked_fill(mask, 0)\n"})
    assert ref_commits({"base": "main", "head": "HEAD"})[1] == []
    with pytest.raises(UsageError, match="--head-ref 'HAED': no such commit, branch or tag"):
        ref_commits({"base": "main", "head": "HAED"})
    with pytest.raises(UsageError, match="--base-ref 'mian': no such .*; did you mean main\\?"):
        ref_commits({"base": "mian", "head": "HEAD"})
    with git_worktrees({"base": "main", "head": None}) as trees:
        assert (trees["base"] / "attention.py").read_text() == "scores.masked_fill_(mask, 0)\n"


def test_a_tree_side_is_named_with_its_commit_and_uncommitted_changes(repo, tmp_path_factory):
    commit = repo.git("rev-parse", "--short=9", "HEAD")
    assert describe_tree(repo.path) == f"{repo.path} (working tree at {commit})"
    (repo.path / "attention.py").write_text("scores = scores.masked_fill(mask, 0)\n")
    assert (
        describe_tree(repo.path)
        == f"{repo.path} (working tree at {commit}, with uncommitted changes)"
    )
    outside = tmp_path_factory.mktemp("plain")  # not a git repository: named as given
    assert describe_tree(outside) == str(outside)


def test_a_repository_without_commits_is_told_so(tmp_path, monkeypatch):
    UserRepo.init(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="--base-ref 'main': the repository .* has no commit yet"):
        ref_commits({"base": "main", "head": "HEAD"})

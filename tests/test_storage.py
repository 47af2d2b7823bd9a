import os

import pytest

from perfsuite.storage import path_inside, write_text_atomic


def test_atomic_write_creates_parents_and_replaces(tmp_path):
    target = tmp_path / "a" / "b" / "table.md"
    write_text_atomic(target, "first")
    write_text_atomic(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["table.md"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("saved baseline")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "half-written")
    assert target.read_text() == "saved baseline"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


@pytest.mark.parametrize(
    "name", ["../../../x/ESCAPED", "..", "/etc/passwd", "a\\..\\b", ".env", ""]
)
def test_a_name_becomes_one_file_inside_its_folder(tmp_path, name):
    path = path_inside(tmp_path, name)
    assert path.parent == tmp_path and path.name not in ("", ".", "..")
    assert not path.name.startswith(".")


def test_a_link_inside_the_folder_pointing_out_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "trace.json").symlink_to(tmp_path / "out" / "trace.json")
    with pytest.raises(ValueError, match="outside"):
        path_inside(tmp_path / "folder", "trace.json")

"""mkdocs-gen-files script: the changelog page. The reference pages that ``reference.py`` generates from
the code are committed under ``docs/reference/`` (``python docs/gen/reference.py`` writes them;
``tests/test_docs.py`` fails when they are not current), so README and tutorial links resolve in the
repository too."""

from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]

# The changelog lives at the repository root (PyPI and readers of the checkout see it there).
with mkdocs_gen_files.open("changelog.md", "w") as page:
    page.write((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
mkdocs_gen_files.set_edit_path("changelog.md", "CHANGELOG.md")

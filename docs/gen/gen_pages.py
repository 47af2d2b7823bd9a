"""mkdocs-gen-files script: writes the reference pages that ``reference.py`` generates from the code."""

import importlib.util
from pathlib import Path

import mkdocs_gen_files

_spec = importlib.util.spec_from_file_location(
    "perfsuite_docs_reference", Path(__file__).with_name("reference.py")
)
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

ROOT = Path(__file__).resolve().parents[2]

# The changelog lives at the repository root (PyPI and readers of the checkout see it there).
with mkdocs_gen_files.open("changelog.md", "w") as page:
    page.write((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
mkdocs_gen_files.set_edit_path("changelog.md", "CHANGELOG.md")

for path, make_page in reference.PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(make_page())
    mkdocs_gen_files.set_edit_path(path, "docs/gen/reference.py")

"""Write the static site: one folder that opens from ``file://`` or any static host and makes no network
request. The chart library (uPlot, MIT, vendored with its licence under ``vendor/``) and our page script
are copied beside ``index.html``; the data is embedded in the page as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite.dashboard.model import Dashboard, to_json
from perfsuite.errors import UsageError
from perfsuite.storage import write_bytes_atomic, write_text_atomic

HERE = Path(__file__).parent
ASSETS = {  # name in the site -> file in the package
    "uPlot.iife.min.js": HERE / "vendor" / "uPlot.iife.min.js",
    "uPlot.min.css": HERE / "vendor" / "uPlot.min.css",
    "uPlot.LICENSE": HERE / "vendor" / "uPlot.LICENSE",
    "dashboard.js": HERE / "assets" / "dashboard.js",
    "dashboard.css": HERE / "assets" / "dashboard.css",
}
MARKER = ".perfsuite-dashboard"  # a folder holding it was written by us and may be rewritten


def embedded_json(data: dict) -> str:
    """JSON safe inside a ``<script>`` element: ``<`` escaped so no ``</script>`` can end it."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def page(data: dict) -> str:
    """``index.html`` with the data embedded; every resource is a relative file of the site."""
    title = data["title"].replace("&", "&amp;").replace("<", "&lt;")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{title}</title><link rel='stylesheet' href='uPlot.min.css'>"
        "<link rel='stylesheet' href='dashboard.css'></head><body>"
        f"<header><h1>{title}</h1><p id='summary'></p></header><main id='app'>Loading...</main>"
        f"<script type='application/json' id='perfsuite-data'>{embedded_json(data)}</script>"
        "<script src='uPlot.iife.min.js'></script><script src='dashboard.js'></script>"
        "<footer>Charts: <a href='uPlot.LICENSE'>uPlot</a> (MIT). Written by perfsuite dashboard.</footer>"
        "</body></html>\n"
    )


def inline_page(data: dict) -> str:
    """One self-contained HTML file: the same page with uPlot, its licence notice and our script inlined."""

    def asset(name: str) -> str:
        return (
            ASSETS[name]
            .read_text()
            .replace("</script", "<\\/script")
            .replace("</style", "<\\/style")
        )

    notice = "/* uPlot (MIT): " + " ".join(asset("uPlot.LICENSE").split()) + " */"
    text = page(data)
    text = text.replace(
        "<link rel='stylesheet' href='uPlot.min.css'>", f"<style>{asset('uPlot.min.css')}</style>"
    )
    text = text.replace(
        "<link rel='stylesheet' href='dashboard.css'>", f"<style>{asset('dashboard.css')}</style>"
    )
    text = text.replace(
        "<script src='uPlot.iife.min.js'></script>",
        f"<script>{notice}\n{asset('uPlot.iife.min.js')}</script>",
    )
    text = text.replace(
        "<script src='dashboard.js'></script>", f"<script>{asset('dashboard.js')}</script>"
    )
    return text.replace(
        "<a href='uPlot.LICENSE'>uPlot</a> (MIT)", "uPlot (MIT, licence in the page source)"
    )


def write_site(dashboard: Dashboard, out: str | Path) -> Path:
    """Write the site into ``out`` (created if missing) and return ``out/index.html``.

    A folder that exists, is not empty and was not written by ``perfsuite dashboard`` is refused
    (``UsageError`` naming it): nothing of the user's is replaced. Each file is written atomically.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise UsageError(
            f"{out}: exists and is not a folder written by perfsuite dashboard; "
            "give an empty or new folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        out / MARKER, "written by perfsuite dashboard; the folder may be rewritten by it\n"
    )
    for name, source in ASSETS.items():
        write_bytes_atomic(out / name, source.read_bytes())
    return write_text_atomic(out / "index.html", page(to_json(dashboard)))

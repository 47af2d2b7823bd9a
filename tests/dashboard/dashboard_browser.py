"""Debian's headless chromium for the dashboard tests, and what counts as a problem on a page."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def record_problems(opened) -> list[str]:
    """Console errors, uncaught exceptions and requests that are not file:// of a page, as they happen."""
    problems: list[str] = []
    opened.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    opened.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    opened.on(
        "request",
        lambda r: (
            problems.append(f"network request: {r.url}")
            if not r.url.startswith(("file://", "data:", "about:"))
            else None
        ),
    )
    return problems

"""Links into a published dashboard: the site and, for a gate's flagged benchmarks, their series.

The site reads its filters from the URL's fragment (``index.html#variant=naive&case=...&mode=forward``,
``assets/dashboard.js``), so a link needs only what the gate knows: variant, case and mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from collections.abc import Mapping
from urllib.parse import urlencode

from perfsuite.errors import UsageError


def series_link(site_url: str, variant: str, case_id: str, mode: str = "forward") -> str:
    """The dashboard at ``site_url`` filtered to one benchmark's series (every measure and testbed)."""
    return (
        site_url.rstrip("/")
        + "/index.html#"
        + urlencode({"variant": variant, "case": case_id, "mode": mode})
    )


def flagged(payload: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(variant, case id, mode, why) of every benchmark a ``perfsuite ab --json`` file flags: a ``slower``
    verdict or a structural change. Keys are ``variant/case`` (forward) or ``variant/case/mode``."""
    found = []
    for bench in payload.get("benchmarks", []):
        slower, structure = bench.get("verdict") == "slower", bench.get("structure") or []
        if not (slower or structure):
            continue
        parts = str(bench.get("key", "")).split("/")
        if len(parts) not in (2, 3):
            continue
        variant, case_id, mode = parts[0], parts[1], parts[2] if len(parts) == 3 else "forward"
        why = "; ".join((["slower"] if slower else []) + list(structure))
        found.append((variant, case_id, mode, why))
    return found


def summary_links(ab_json: str | Path, site_url: str) -> str:
    """Markdown for a job summary: the dashboard, then one line per flagged benchmark linking its series.
    ``UsageError`` naming the file when it is not a ``perfsuite ab --json`` output."""
    path = Path(ab_json)
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable perfsuite ab --json file ({exc})") from None
    if not isinstance(payload, dict) or "benchmarks" not in payload:
        raise UsageError(f"{path}: not a perfsuite ab --json file (no 'benchmarks')")
    lines = [
        "",
        f"**History:** [the perfsuite dashboard]({site_url.rstrip('/')}/index.html) (main branch)",
        "",
    ]
    for variant, case_id, mode, why in flagged(payload):
        lines.append(
            f"- [`{variant}/{case_id}/{mode}`]({series_link(site_url, variant, case_id, mode)}): {why}"
        )
    return "\n".join(lines) + "\n"

"""``perfsuite dashboard``: the static site (findings, fastest implementations, charts) from the history store."""

from __future__ import annotations

import argparse
import sys
import urllib.parse

DEFAULT_OUT = "perfsuite-dashboard"


def parse_web_url(text: str) -> str:
    """``--repo-url`` / ``--site-url``: an ``http://`` or ``https://`` URL with a host, as given
    (empty: none, the default).

    The page turns it into links, so any other scheme (``javascript:``, ``data:``, ``file:``) would
    run or open something in the reader's browser. Raises ``argparse.ArgumentTypeError`` naming it."""
    if not text.strip():
        return ""
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme.lower() not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed: an http:// or https:// URL with a host "
            "(e.g. https://github.com/ORG/REPO)"
        )
    return text.strip()


def add_command(commands) -> None:
    dash = commands.add_parser(
        "dashboard", help="write the history dashboard: a static site, no network request"
    )
    dash.add_argument(
        "--store",
        help="history store URL or SQLite path (default: $PERFSUITE_HISTORY_URL, the "
        "perfsuite_history_url ini key, or .perfsuite/history.sqlite)",
    )
    dash.add_argument(
        "--out", default=DEFAULT_OUT, help=f"folder to write the site into (default {DEFAULT_OUT})"
    )
    dash.add_argument(
        "--repo-url",
        default="",
        type=parse_web_url,
        help="https://github.com/ORG/REPO: commits become links",
    )
    dash.add_argument("--title", default="perfsuite dashboard", help="the page's title")
    dash.add_argument(
        "--links",
        metavar="AB_JSON",
        help="instead of a site: print Markdown linking the published "
        "dashboard and the series of each benchmark this "
        "perfsuite ab --json file flags (for a job summary)",
    )
    dash.add_argument(
        "--site-url", type=parse_web_url, help="where the dashboard is published (with --links)"
    )
    dash.add_argument(
        "--rev",
        help="follow this git revision's first-parent history (default: the default branch's, "
        "origin/HEAD or main or master: a pull request's commits and A/B heads are left out)",
    )
    dash.add_argument(
        "--branch",
        help="only runs recorded on this branch, in their recorded first-parent positions",
    )


def run_dashboard(args: argparse.Namespace) -> int:
    if args.links:
        from perfsuite.dashboard.links import summary_links
        from perfsuite.errors import UsageError

        if not args.site_url:
            raise UsageError("--links needs --site-url (where the dashboard is published)")
        print(summary_links(args.links, args.site_url), end="")
        return 0
    from perfsuite.dashboard.from_store import dashboard_from_store
    from perfsuite.dashboard.site import write_site
    from perfsuite.history import open_store

    from perfsuite.cli.history import commit_order, merged_at

    with open_store(args.store, create=False) as store:  # HistoryError names the file or URL
        order = commit_order(store, args.rev, args.branch, "dashboard")
        merges = merged_at(store, order, store.list_series(measure="time_s"))
        dashboard = dashboard_from_store(
            store, args.title, args.repo_url, order, args.branch, merged_at=merges
        )
    index = write_site(dashboard, args.out)
    every = [c for s in dashboard.series for c in s.change_points]
    unconfirmed = sum(c.status == "unconfirmed" for c in every)
    regressions = sum(c.open and c.regression for c in every)
    print(
        f"wrote {index}: {len(dashboard.series)} series over {len(dashboard.commits)} commits, "
        f"{len(every) - unconfirmed} finding(s), {regressions} open regression(s) (as perfsuite "
        f"history detect confirms them), {unconfirmed} unconfirmed step(s) between separate runs; "
        "open it in a browser (file://) or publish the folder",
        file=sys.stderr,
    )
    return 0

"""The dashboard: a static site (findings, fastest implementations, the post's checks, per-series charts,
comparisons) from the history store or from one saved run. ``model`` is what it shows, ``site`` writes it."""

"""The pytest plugin (options, hooks, fixtures), its per-run session, settings, and the attention suite's test module."""

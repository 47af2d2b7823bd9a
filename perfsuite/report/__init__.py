"""Output: result rows, the end-of-run table, saved runs (run.json), HTML/Markdown reports and plots."""

"""Reading Kineto / Chrome traces: per-window summaries, kernel families, text rendering and diffs."""

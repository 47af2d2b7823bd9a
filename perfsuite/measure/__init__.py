"""Running and observing one variant on one case: preparation, profiling, timing, compile stats, saved tensors, peaks, machine info."""

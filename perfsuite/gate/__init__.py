"""The regression gate: statistics, comparison of saved runs, the interleaved A/B gate and its worker, structural fingerprints."""

"""evalkit.compare: is serving configuration B better than A, metric by metric?

Runs of two configurations (run directories or result files of a supported harness) are
paired by seed, trace or repetition index, each named metric's mean paired difference is
tested with the seed-level test of the gate (:func:`evalkit.stats.paired.paired_mean_test`)
and gets one of three verdicts -- better, equivalent within a margin, not yet known (with the
number of further paired runs that would decide) -- or worse, only when significant.
"""

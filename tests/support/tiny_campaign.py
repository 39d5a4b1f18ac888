"""The tiny simulated campaign the sweep and run-order tests replay: 160 s of a square-wave
trace, two seeds of wa and its calibrated_offline oracle, two matched-random draws each."""

TINY_SQUARE_WAVE = """
regime = "tiny"
seeds = 2
matched_random_draws = 2
horizon_s = 160.0
inner_step_s = 0.5
h_min = 40
h_max = 120
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 40.0
burst_s = 10.0
quiet_rate = 1.0
busy_rate = 4.0
prompt_tokens = "lognormal:128,0.5"
output_tokens = "lognormal:32,0.5"
[[policies]]
name = "wa"
[[policies]]
name = "calibrated_offline"
params = { k_from = "wa" }
"""

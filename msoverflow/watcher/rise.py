"""What a divergence is, in one place: the watcher's detector (detect.py) calls it on the steps read, the
training process's sampling hint (capture.py) on the losses it has seen. Plain Python (the training process
imports it; no numpy, no reader).

A loss diverges when it rose in each of its last RISE_STEPS readings to at least DIVERGE_FACTOR times the lower
quartile of the window, by more than NOISE_SIGMAS times its own step-to-step noise. Without the noise test, a loss
that only wanders (a small batch's, or targets with nothing to learn) climbs 4 steps in a row to twice its lowest
by chance every few hundred steps: seen on a real run (tests/support/watch_cases/train_case.py, case noisy) and on
the MLP of the watch benchmark. The quartile, not the lowest: one low outlier at the foot of a chance climb made
the rise look like 6 deviations (the benchmark MLP's loss, steady around 1: 0.45, its lowest in 8,000 steps, then
four rises to 1.49, its usual top; once a run, at step 4,251). Over 200,000 steps each of chi2 losses with 2 to 64
degrees of freedom and a lognormal one: 15 such calls from the lowest, none from the quartile.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

RISE_STEPS = 4
WINDOW = 24                  # the readings the lower quartile is taken over (the rise included)
DIVERGE_FACTOR = 2.0
NOISE_SIGMAS = 6.0           # the rise over the window's lower quartile, in robust deviations of the log loss's
                             # steps
NOISE_WINDOW = 60            # the readings before the rise its noise is measured on (20: a noisier estimate, and
                             # 4.5 deviations fired 0.75 times in 10,000 steps of a chi2(64) loss)


def step_noise(values: Sequence[float]) -> Optional[float]:
    """The robust spread (1.4826 MAD) of a series' step-to-step changes of log value around their median: the
    noise a loss wanders by, its steady descent or rise taken out. None with fewer than 5 changes."""
    logs = [math.log(v) for v in values if v > 0]
    changes = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    if len(changes) < 5:
        return None
    middle = statistics.median(changes)
    return statistics.median(abs(c - middle) for c in changes) * 1.4826


def diverging(values: Sequence[float], rises: int = RISE_STEPS) -> Optional[dict]:
    """The rise's figures when the last readings of `values` (oldest first, at most NOISE_WINDOW + rises of them
    used) are a divergence after `rises` rises in a row; else None. rises: RISE_STEPS for the event, fewer for an
    earlier hint."""
    window = values[-WINDOW:]
    if len(window) < rises + 2:
        return None
    last = window[-(rises + 1):]
    if not all(b > a for a, b in zip(last, last[1:], strict=False)):
        return None
    low = sorted(window)[len(window) // 4]
    if low <= 0 or last[0] <= 0 or window[-1] < DIVERGE_FACTOR * low:      # (ratios of positive values)
        return None
    rise = math.log(window[-1] / low)
    noise = step_noise(values[-(NOISE_WINDOW + rises):-rises])
    if noise is not None and rise < NOISE_SIGMAS * noise:
        return None
    return {"low": low, "rise": rise, "noise": noise}

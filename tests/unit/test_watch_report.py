"""The watch's JSON series stay bounded on long runs (watcher/report.thin): a 20,000-step run gave 6.7 MB of series,
growing with the run. Peaks, non-finite readings and the steps around events are never thinned away."""
import json

from msoverflow.watcher.report import EVENT_MARGIN, SERIES_POINTS, thin


def _series(n):
    steps = list(range(n))
    max_abs = [1.0 + (i % 7) * 0.01 for i in steps]
    nonfinite = [0] * n
    max_abs[12_345] = 900.0                       # a spike far from any event
    nonfinite[15_000], max_abs[15_000] = 3, None  # a NaN reading
    return {"tensor": "fc.weight", "rank": 0, "kind": "parameter", "op": "", "cell": "fc", "dtype": "float32",
            "steps": steps, "max_abs": max_abs, "min": [-v if v else None for v in max_abs],
            "max": list(max_abs), "mean_abs": [0.5] * n, "nonfinite": nonfinite}


def test_a_long_series_is_thinned_keeping_peaks_nans_and_the_steps_around_events():
    one = _series(20_000)
    out = thin(one, events=[18_000])
    kept = out["steps"]
    assert len(kept) <= SERIES_POINTS + 2 * EVENT_MARGIN + 2
    assert len(json.dumps(out)) < len(json.dumps(one)) / 5
    assert {0, 19_999, 12_345, 15_000} <= set(kept)
    assert set(range(18_000 - EVENT_MARGIN, 18_000 + EVENT_MARGIN + 1)) <= set(kept)
    assert kept == sorted(kept)
    by_step = dict(zip(out["steps"], out["max_abs"], strict=True))
    assert by_step[12_345] == 900.0 and by_step[15_000] is None
    assert dict(zip(out["steps"], out["nonfinite"], strict=True))[15_000] == 3
    for column in ("max_abs", "min", "max", "mean_abs", "nonfinite"):
        assert len(out[column]) == len(kept)
    assert out["thinned"]["points"] == 20_000 and out["thinned"]["kept"] == len(kept)
    assert out["tensor"] == "fc.weight" and out["cell"] == "fc"


def test_a_short_series_is_left_whole():
    one = _series(20_000)
    short = {k: (v[:SERIES_POINTS] if isinstance(v, list) else v) for k, v in one.items()}
    assert thin(short, events=[5]) is short

"""The video/audio presets hold exactly the values that `scripts/calibrate_synthetic.py --fit-media` wrote into
the committed calibration report (data/calibration_synthetic.csv, column "fitted parameters" of the media rows)."""

from __future__ import annotations

import pandas as pd

from conftest import REPO
from hubnorm import media

CSV = REPO / "data" / "calibration_synthetic.csv"
FREE = {"msrvtt": ["caption_noise", "caption_bias_std", "bias_std"], "didemo": ["caption_noise", "caption_bias_std"],
        "audiocaps": ["caption_noise"], "clotho": ["caption_noise"]}


def _parse(text):
    return {k.strip(): float(v) for k, v in (item.split("=") for item in str(text).split(";") if item.strip())}


def test_presets_equal_the_committed_fit():
    rows = pd.read_csv(CSV)
    for preset, p in media.MEDIA_PRESETS.items():
        written = rows.loc[rows["preset"] == preset, "fitted parameters"].dropna().unique()
        assert len(written) == 1, (preset, written)          # one fit per preset, on every row of it
        fitted = _parse(written[0])
        assert set(fitted) == set(FREE[preset]), preset
        assert {k: p.overrides[k] for k in fitted} == fitted, (preset, p.overrides, fitted)

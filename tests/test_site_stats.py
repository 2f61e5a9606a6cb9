"""Range statistics of an activation site (qcore.model.site_stats) against scipy and numpy,
on a synthetic site with known outlier channels and on MiniLM's shipped FFN activation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from qcore import datasets
from qcore.model.site_stats import OUTLIER_RATIO, range_stats, reading


def test_known_outlier_channels_and_their_share():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 50, 64)).astype(np.float32)
    x[..., 7] *= 40  # two channels far above the rest
    x[..., 3] *= 25
    s = range_stats([x[0], x[1]])
    assert s["outlier_channels"] == [7, 3]  # largest first
    per = np.abs(x).reshape(-1, 64).max(axis=0)
    rest = np.delete(per, [3, 7]).max()
    assert s["outlier_share"] == pytest.approx(1 - rest / np.abs(x).max())
    assert s["max_abs"] == pytest.approx(float(np.abs(x).max()))
    assert s["std"] == pytest.approx(float(x.astype(np.float64).std()))
    assert s["excess_kurtosis"] == pytest.approx(sps.kurtosis(x.ravel().astype(np.float64),
                                                             fisher=True, bias=True))
    sentence = reading(s)
    assert "2 of 64 channels" in sentence and "int8" in sentence and "float8" in sentence


def test_an_even_site_has_no_outliers_and_says_so():
    x = np.random.default_rng(1).uniform(-1, 1, (100, 32))
    s = range_stats(x)
    assert s["outlier_channels"] == [] and s["outlier_share"] == 0
    assert s["excess_kurtosis"] == pytest.approx(-1.2, abs=0.1)  # a uniform distribution's
    assert "evenly spread" in reading(s)
    assert range_stats(np.zeros((3, 4)))["max_abs"] == 0
    assert range_stats(np.array([[np.nan, 1.0], [np.inf, -1.0]]))["max_abs"] == 1.0


def test_minilm_ffn_activation_agrees_with_scipy():
    x = datasets.load("layer0.ffn.act")
    s = range_stats(x)
    x64 = x.astype(np.float64).ravel()
    assert s["excess_kurtosis"] == pytest.approx(sps.kurtosis(x64), rel=1e-9)
    assert s["max_over_std"] == pytest.approx(np.abs(x64).max() / x64.std(), rel=1e-9)
    per = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
    assert s["outlier_channels"] == sorted(
        np.flatnonzero(per > OUTLIER_RATIO * np.median(per)).tolist(), key=lambda i: -per[i])

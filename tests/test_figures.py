"""generate_all regenerates every figure, byte for byte, from fixed seeds; the closed forms it draws hold."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from emqsim import figures

EXPECTED = {
    "timeline-fast-dead-lease.svg",
    "timeline-fast-dead-lease.png",
    "timeline-slow-alive-timeout.svg",
    "timeline-frozen-lease.svg",
    "two-columns.svg",
    "two-columns.png",
    "frontier.svg",
    "frontier.png",
    "latency-cdf.svg",
    "latency-cdf.png",
    "heatmap.svg",
    "freeze-curve.svg",
    "freeze-curve.png",
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    one = tmp_path_factory.mktemp("one")
    two = tmp_path_factory.mktemp("two")
    first = figures.generate_all(one, quick=True, processes=1)
    second = figures.generate_all(two, quick=True, processes=2)  # a process pool changes nothing
    return one, two, first, second


def test_generate_all_writes_every_figure(generated):
    one, _, first, _ = generated
    assert {p.name for p in first} == EXPECTED
    assert all(p.parent == one and p.stat().st_size > 1000 for p in first)


def test_generate_all_is_byte_identical(generated):
    one, two, first, second = generated
    assert [p.name for p in first] == [p.name for p in second]
    for p in first:
        assert p.read_bytes() == (two / p.name).read_bytes(), p.name


def test_svg_has_no_date_or_version(generated):
    one, *_ = generated
    text = (one / "frontier.svg").read_text()
    assert "<dc:date>" not in text
    assert "Matplotlib v" not in text


def test_closed_forms():
    t = np.linspace(0, 60, 601)
    cdf = figures.lease_latency_cdf(30, 10, 5)(t)
    assert cdf[t <= 20].max() == 0 and cdf[t >= 35].min() == 1
    assert np.all(np.diff(cdf) >= -1e-12)
    mean = float(np.sum(1 - cdf) * (t[1] - t[0]))
    assert mean == pytest.approx(30 - 10 / 2 + 5 / 2, abs=0.1)  # E[T_D] = L - B/2 + S/2
    t2 = np.linspace(0, 200, 2001)
    tcdf = figures.timeout_latency_cdf(120, 5, 50)(t2)
    assert tcdf[t2 <= 70].max() == 0 and tcdf[t2 >= 125].min() == 1

"""generate_all regenerates every figure, byte for byte, from fixed seeds; the closed forms it draws hold."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

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


def test_figures_keeps_the_closed_form_cdfs_it_used_to_define():
    from emqsim import analytic

    assert figures.lease_latency_cdf is analytic.lease_latency_cdf
    assert figures.timeout_latency_cdf is analytic.timeout_latency_cdf

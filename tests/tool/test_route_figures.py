"""RouteLLM's figures of a router (:mod:`inferplane.tool.route_figures`): the curve, CPT, APGR and the threshold for a
share of strong calls, on small hand-counted cases and over random ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.tool.route_figures import curve, oracle_scores, threshold_for_share

# Five prompts: only the strong model gets the first right, both the second, neither the third, only the cheap one
# the fourth, only the strong one the fifth. Cheap accuracy 0.4, strong 0.6.
CHEAP = np.array([False, True, False, True, False])
STRONG = np.array([True, True, False, False, True])


def test_a_router_that_cannot_tell_prompts_apart_is_the_random_line() -> None:
    """Equal scores go to one model together: the curve is the straight line from cheap to strong, CPT(x) = x and
    APGR one half, exactly what a random router gives on average."""
    routed = curve(np.zeros(5), CHEAP, STRONG)
    assert routed.shares.tolist() == [0.0, 1.0]
    assert routed.quality.tolist() == pytest.approx([0.4, 0.6])
    assert (routed.cheap, routed.strong) == pytest.approx((0.4, 0.6))
    assert routed.cpt(0.5) == pytest.approx(0.5)
    assert routed.cpt(0.8) == pytest.approx(0.8)
    assert routed.apgr() == pytest.approx(0.5)
    assert routed.quality_at(0.25) == pytest.approx(0.45)


def test_the_perfect_router_sends_only_the_strong_only_prompts_first() -> None:
    perfect = curve(oracle_scores(CHEAP, STRONG), CHEAP, STRONG)
    # Gains 1, 0, 0, -1, 1: the two gains of 1 first (quality 0.4 -> 0.8), the zeros, then the -1 (0.8 -> 0.6).
    assert perfect.shares.tolist() == [0.0, 0.4, 0.8, 1.0]
    assert perfect.quality.tolist() == pytest.approx([0.4, 0.8, 0.8, 0.6])
    # Half the gap (0.1) is at a fifth of the way to 0.4: 0.4 * 0.1 / 0.4 = 0.1.
    assert perfect.cpt(0.5) == pytest.approx(0.1)
    assert perfect.cpt(0.8) == pytest.approx(0.16)
    assert perfect.thresholds.tolist() == [np.inf, 1.0, 0.0, -1.0]


def test_a_router_scoring_backwards_needs_more_strong_calls_than_random() -> None:
    # The strong-only prompts scored lowest: quality falls first, and only the last point reaches the strong model.
    backwards = curve(-oracle_scores(CHEAP, STRONG), CHEAP, STRONG)
    assert backwards.shares.tolist() == pytest.approx([0.0, 0.2, 0.6, 1.0])
    assert backwards.quality.tolist() == pytest.approx([0.4, 0.2, 0.2, 0.6])
    # 80% of the gap is 0.56, crossed between 0.6 (0.2) and 1.0 (0.6): 0.6 + 0.4 * 0.36 / 0.4.
    assert backwards.cpt(0.8) == pytest.approx(0.96)
    assert backwards.apgr() < 0.5


def test_a_curve_needs_as_many_labels_as_scores() -> None:
    with pytest.raises(ValueError, match="5 scores for 4 and 5 labels"):
        curve(np.zeros(5), CHEAP[:4], STRONG)


@settings(max_examples=80, deadline=None)
@given(
    scores=st.lists(st.integers(min_value=-4, max_value=4), min_size=1, max_size=60),
    share=st.floats(min_value=0.0, max_value=1.0),
)
def test_the_threshold_for_a_share_sends_at_most_that_share_and_no_threshold_sends_more(
    scores: list[int], share: float
) -> None:
    """Scores with many ties (as a mean of k gains has): the chosen threshold sends at most ``share`` of them to the
    strong model, and the next lower score would send more than ``share``."""
    values = np.array(scores, dtype=np.float64) / 4
    threshold = threshold_for_share(values, share)
    sent = float(np.mean(values >= threshold))
    assert sent <= share + 1e-9
    lower = values[values < threshold]
    if len(lower):
        assert float(np.mean(values >= lower.max())) > share


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), n=st.integers(min_value=2, max_value=80))
def test_the_curve_runs_from_the_cheap_model_to_the_strong_one_and_the_perfect_router_bounds_it(
    seed: int, n: int
) -> None:
    rng = np.random.default_rng(seed)
    cheap, strong = rng.random(n) < 0.6, rng.random(n) < 0.8
    scores = rng.integers(0, 5, size=n).astype(np.float64)
    routed = curve(scores, cheap, strong)
    perfect = curve(oracle_scores(cheap, strong), cheap, strong)
    assert routed.shares[0] == 0.0 and routed.shares[-1] == 1.0
    assert routed.quality[0] == pytest.approx(cheap.mean()) and routed.quality[-1] == pytest.approx(strong.mean())
    for share in np.linspace(0, 1, 11):
        assert routed.quality_at(share) <= perfect.quality_at(share) + 1e-9
    # At each point, the quality is that of sending exactly the prompts scored at or above its threshold.
    for share, quality, threshold in zip(routed.shares, routed.quality, routed.thresholds, strict=True):
        to_strong = scores >= threshold
        assert to_strong.mean() == pytest.approx(share)
        assert np.where(to_strong, strong, cheap).mean() == pytest.approx(quality)

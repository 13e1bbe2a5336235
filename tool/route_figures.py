"""How a router is judged, as RouteLLM's ``evals/evaluate.py`` judges it (arXiv 2406.18665, section 5).

Sending the prompts with the highest scores to the strong model and the rest to the cheap one, quality (the share
answered correctly) is a curve over the share of strong calls: from the cheap model's accuracy at 0 to the strong
model's at 1. A random router's curve is the straight line between them; the perfect router sends only the prompts
that only the strong model gets right. Figures:

* CPT(x): the least share of strong calls that recovers x of the quality gap between the two models (a random router
  needs x itself), so ``1 - CPT(x) / x`` is the share of strong calls saved against a random router at that quality;
* APGR: the area between the curve and the cheap model's accuracy, as a share of the gap (0.5 for random).

Prompts with equal scores go to one model together (a threshold cannot split them), so the curve has a point only
where the score changes and is a straight line in between: what breaking the tie at random would give on average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Curve:
    """Quality against the share of strong calls, at every threshold that changes the routing."""

    shares: npt.NDArray[np.float64]
    """Share of prompts sent to the strong model, increasing from 0 to 1."""
    quality: npt.NDArray[np.float64]
    """Share answered correctly at that share."""
    thresholds: npt.NDArray[np.float64]
    """The least score sent to the strong model at that share (``inf`` at 0)."""
    cheap: float
    """The cheap model's accuracy (every prompt to it)."""
    strong: float
    """The strong model's accuracy (every prompt to it)."""

    @property
    def gap(self) -> float:
        """What the strong model adds over the cheap one."""
        return self.strong - self.cheap

    def quality_at(self, share: float) -> float:
        """Quality at a share of strong calls (between two points: the line joining them)."""
        return float(np.interp(share, self.shares, self.quality))

    def cpt(self, recovered: float) -> float:
        """The least share of strong calls whose quality recovers ``recovered`` of the gap (1.0 when none does)."""
        target = self.cheap + recovered * self.gap
        above = np.flatnonzero(self.quality >= target - 1e-12)
        if len(above) == 0:
            return 1.0
        i = int(above[0])
        if i == 0:
            return 0.0
        low_share, high_share = self.shares[i - 1], self.shares[i]
        low, high = self.quality[i - 1], self.quality[i]
        return float(low_share + (high_share - low_share) * (target - low) / (high - low))

    def apgr(self) -> float:
        """Average performance gap recovered: the area under the curve above the cheap model, over the gap."""
        area = float(np.sum((self.shares[1:] - self.shares[:-1]) * (self.quality[1:] + self.quality[:-1]) / 2))
        return (area - self.cheap) / self.gap if self.gap else 0.0


def curve(scores: Scores, cheap_correct: Flags, strong_correct: Flags) -> Curve:
    """The curve of a router scoring ``scores`` (higher: more in need of the strong model)."""
    n = len(scores)
    if n == 0 or len(cheap_correct) != n or len(strong_correct) != n:
        raise ValueError(f"{n} scores for {len(cheap_correct)} and {len(strong_correct)} labels")
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    gains = strong_correct[order].astype(np.float64) - cheap_correct[order].astype(np.float64)
    cheap = float(cheap_correct.mean())
    # The last index of every run of equal scores: a threshold sends a whole run or none of it.
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    gained = np.cumsum(gains)[ends] / n
    return Curve(
        shares=np.concatenate([[0.0], (ends + 1) / n]),
        quality=np.concatenate([[cheap], cheap + gained]),
        thresholds=np.concatenate([[np.inf], ranked[ends]]),
        cheap=cheap,
        strong=float(strong_correct.mean()),
    )


def oracle_scores(cheap_correct: Flags, strong_correct: Flags) -> Scores:
    """The perfect router's scores: each prompt's own gain."""
    return strong_correct.astype(np.float64) - cheap_correct.astype(np.float64)


def threshold_for_share(scores: Scores, share: float) -> float:
    """The least threshold that sends at most ``share`` of these prompts to the strong model (a threshold above
    every score when even the highest run of equal scores is more than that share)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share} is not between 0 and 1")
    ranked = np.sort(scores)[::-1]
    allowed = int(np.floor(share * len(ranked) + 1e-9))
    if allowed >= len(ranked):
        return float(ranked[-1])
    candidate = ranked[allowed]  # the first score that must stay cheap: the threshold is the next one above it
    above = ranked[ranked > candidate]
    return float(above.min()) if len(above) else float(np.nextafter(ranked[0], np.inf))

"""A claim after its verdict, typed: what its interval rests on (``Measured``, a score's contrast or two
collapse rates) and its outcome with what it says (``Verdict``), each carrying its grid.claims.Claim, so
that a reader asks the claim (its scale, whether it is a cost) instead of looking its kind up again.
summary.json holds a verdict as ``Verdict.row`` and a reader of that file gets it back by
``Verdict.from_row`` (analysis.claims.summary_file: the one edge that writes and reads the file).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from analysis.statistics.predictive import COLLAPSE_DRAWS, DRAWS, RERUNS
from grid.claims import NOT_TESTED, Claim

REPLICATION_METHOD = (f"posterior predictive: {DRAWS} draws from the posterior of the per-seed contrast's mean and "
                      f"sd (reference prior 1/sd), each read against the same {RERUNS} reruns of the design (its "
                      f"looks and levels); collapse: {COLLAPSE_DRAWS} draws from Jeffreys Beta posteriors of the "
                      "rates, exact binomial reruns; the point: the mean over the draws of the probability that a "
                      "rerun agrees, the range: its 10th-90th percentiles")


@dataclass(frozen=True)
class Measured:
    """A claim's estimate at one look's seeds and what its interval rests on (None: not finite)."""

    estimate: float | None
    n: int
    method: str
    test: str
    p: float | None


@dataclass(frozen=True)
class ScoreMeasured(Measured):
    """A contrast of cell means of a score (analysis.statistics.contrasts)."""

    se: float | None
    df: float | None
    spread: float | None


@dataclass(frozen=True)
class RateMeasured(Measured):
    """A difference of two cells' collapse rates; counts: [collapsed x, n x, collapsed y, n y]."""

    z: float | None
    counts: list[int]
    rates: list[float]


MEASURED = {"points": ScoreMeasured, "rate": RateMeasured}  # by Claim.scale


@dataclass(frozen=True)
class Verdict:
    """A claim decided: its outcome (``verdict``; NOT_TESTED without a cell of this grid, then nothing
    measured), the interval it was read from at its look's level, what it says (``why``), the probability
    that a rerun repeats it and the robustness checks beside it (analysis.claims.robustness)."""

    claim: Claim
    statement: str
    family_size: int
    verdict: str
    why: str
    final: bool
    measured: Measured | None = None
    low: float | None = None
    high: float | None = None
    confidence: float | None = None
    look: int | None = None
    looks: int | None = None
    seeds_needed: int | None = None
    threshold_lag: dict | None = None  # a trend with a threshold only (analysis.claims.verdicts.threshold_lag)
    replication: float | None = None
    replication_low: float | None = None
    replication_high: float | None = None
    boundary: str | None = None
    skew: dict | None = None
    crosscheck: dict | None = None
    spread_check: dict | None = None

    @property
    def tested(self) -> bool:
        return self.verdict != NOT_TESTED

    @property
    def shown_as(self) -> tuple[float, str, int]:
        """How its numbers are shown: (factor, unit, digits): a rate as it is, a score in points."""
        return (1, "", 2) if self.claim.scale == "rate" else (100, " points", 1)

    def row(self) -> dict:
        """The verdict as summary.json's ``claims`` hold it, key by key in the file's order."""
        row = {**self.claim.row(), "statement": self.statement, "family_size": self.family_size}
        replication = {"replication": self.replication, "replication_low": self.replication_low,
                       "replication_high": self.replication_high}
        checks = {"skew": self.skew, "crosscheck": self.crosscheck, "spread_check": self.spread_check}
        if self.measured is None:
            return {**row, "verdict": self.verdict, "why": self.why, "final": self.final, **replication, **checks}
        row.update(dataclasses.asdict(self.measured))
        row.update({"low": self.low, "high": self.high, "confidence": self.confidence, "look": self.look,
                    "looks": self.looks, "outcome": self.verdict, "final": self.final,
                    "seeds_needed": self.seeds_needed})
        if self.claim.threshold is not None:
            row["threshold_lag"] = self.threshold_lag
        return {**row, "verdict": self.verdict, "why": self.why, **replication,
                "replication_method": REPLICATION_METHOD, "boundary": self.boundary, **checks}

    @classmethod
    def from_row(cls, row: dict, claim: Claim | None = None, reference_lag: int = 0) -> "Verdict":
        """The verdict a summary.json row holds (``claim``: the declared claim, default the row's at
        ``reference_lag``, the grid's: the row does not hold it)."""
        claim = claim or Claim.from_row(row, reference_lag)
        measured = None
        if "estimate" in row:
            kind = MEASURED[claim.scale]
            measured = kind(**{field.name: row.get(field.name) for field in dataclasses.fields(kind)})
        own = {field.name: row.get(field.name) for field in dataclasses.fields(cls)
               if field.name not in ("claim", "measured")}
        return cls(claim=claim, measured=measured, **own)

"""The config's claims and their seed schedule, typed: the ``claims`` and ``seeding`` sections
(analysis.claims.verdicts answers them; docs/statistics.md). Self-contained: defaults live in the schema,
the tests in analysis/; grid.config calls claim_errors and seeding_errors among its semantic
checks, so a claim naming no recipe, or looks that do not increase, stop before any job runs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from grid.lines import nearest

# the outcome of a claim whose cells the grid lacks (a narrowed grid): no interval, no share of alpha spent
NOT_TESTED = "not tested in this grid"


@dataclass(frozen=True)
class Seeding:
    """The config's ``seeding`` section: the declared seed schedule of the claims (analysis.claims.verdicts)."""

    looks: tuple[int, ...]
    """Seeds per cell at each look: the claims are read at seeds[:n] for each n."""
    boundary: str
    """The alpha-spending function over the looks: obrien_fleming or pocock."""

    @classmethod
    def of(cls, config: dict) -> "Seeding | None":
        """The schedule this grid runs: the declared looks that its seeds allow, ending at its seed
        count (a grid narrowed to 5 seeds runs looks [3, 6, 10] as [3, 5]; seeds past the last look
        are not run); None, a fixed design,
        without a declared schedule or when one look is left."""
        section, count = config.get("seeding"), len(config["seeds"])
        if section is None:
            return None
        last = min(section["looks"][-1], count)
        looks = tuple(n for n in section["looks"] if n < last) + (last,)
        return cls(looks, section["boundary"]) if len(looks) > 1 else None


@dataclass(frozen=True)
class Family:
    """The confirmatory family the claims room reads (analysis.claims.verdicts): the claims declared (the level is
    alpha over all of them; each knows its reference lag), the seed schedule they are read at (None: every seed at
    once), the grid's seeds in their declared order (None: the cells') and its step budget (a collapse claim's
    horizon)."""

    claims: tuple["Claim", ...]
    steps: int
    seeding: Seeding | None = None
    seeds: tuple[int, ...] | None = None


def seeding_errors(config: dict) -> list[str]:
    """A schedule whose looks do not increase."""
    looks = (config.get("seeding") or {}).get("looks", [])
    if any(b <= a for a, b in zip(looks, looks[1:])):
        return [f"config key 'seeding.looks': {list(looks)} must increase"]
    return []


# The fields of a claim's row in summary.json, every kind's, in this order (None where a kind has none).
ROW_FIELDS = ("name", "kind", "recipe", "lag", "expect", "smallest_effect", "metric", "versus", "versus_lag",
              "other_recipe", "other_versus", "of", "lags", "threshold")


@dataclass(frozen=True)
class Claim:
    """One declared claim: a comparison, its endpoint and the smallest effect that matters. A kind is a
    subclass (KINDS): its cells, its words, its scale and whether it is a staleness cost; a new kind is
    one class here and its schema entry (workflow/schemas/config.schema.yaml)."""

    name: str  # unique label, the claim's row in table.md / table.csv / summary.json
    recipe: str
    lag: int
    expect: str  # greater | less | equivalent: the claimed sign of the contrast, or |contrast| < margin
    smallest_effect: float  # fraction of the score (or of the collapse rate; trend: per unit of lag)
    metric: str  # auc | fixed | best | selected (unused by collapse claims)
    # the per-seed sd of the contrast the design was planned at (a fraction of the score, e.g. the field's): a
    # spread far from it is flagged beside the outcome (analysis.claims.robustness); None: not declared
    planning_spread: float | None = dataclasses.field(default=None, kw_only=True)
    # the grid's smallest lag, a staleness cost's base (build: the smallest of the grid's lags)
    reference_lag: int = dataclasses.field(kw_only=True)

    kind: ClassVar[str]  # the config's ``kind``
    words: ClassVar[str]  # the contrast in words, formatted with the claim's fields
    scale: ClassVar[str] = "points"  # points: a contrast of cell means of a score; rate: of collapse rates
    is_cost: ClassVar[bool] = False  # a staleness cost or a difference of them (marked in staleness.png)
    about_lag: ClassVar[bool] = False  # compares how scores change with lag (named on the cost-against-lag panel)
    own_fields: ClassVar[tuple[str, ...]] = ()  # config fields only this kind has
    threshold: ClassVar[float | None] = None  # a trend's cost threshold (Trend); no other kind has one

    @staticmethod
    def build(section: dict, grid_lags=(), reference_lag: int | None = None) -> "Claim":
        """The claim of a checked config section, as its kind's class; its reference lag the grid's smallest."""
        reference = min(grid_lags) if reference_lag is None else reference_lag
        return KINDS[section["kind"]].from_section(section, tuple(grid_lags), reference)

    @staticmethod
    def from_row(row: dict, reference_lag: int) -> "Claim":
        """The claim a summary.json row holds (``row``: its ROW_FIELDS; no planning spread, which the row lacks)."""
        return Claim.build({field: row[field] for field in ROW_FIELDS if row.get(field) is not None},
                           reference_lag=reference_lag)

    @classmethod
    def from_section(cls, section: dict, grid_lags: tuple[int, ...], reference_lag: int) -> "Claim":
        return cls(name=section["name"], recipe=section["recipe"], lag=section["lag"], expect=section["expect"],
                   smallest_effect=float(section["smallest_effect"]), metric=section["metric"],
                   planning_spread=section.get("planning_spread"), reference_lag=reference_lag,
                   **cls._own(section, grid_lags))

    @classmethod
    def _own(cls, section: dict, grid_lags: tuple[int, ...]) -> dict:
        """The kind's own fields from its config section."""
        return {}

    def cells(self) -> list[tuple[float, str, int]]:
        """(weight, recipe, lag) of the cells whose weighted seed means make the contrast."""
        raise NotImplementedError

    def read_cells(self) -> list[tuple[str, int]]:
        """The cells (recipe, lag) whose runs the claim reads."""
        return [(recipe, lag) for _, recipe, lag in self.cells()]

    def describe(self) -> str:
        """What the claim compares, in words (analysis.claims.verdicts.statement adds its endpoint and effect)."""
        return self.words.format(**vars(self))

    def errors(self, key: str) -> list[str]:
        """What a config check refuses of this kind (``key``: "config key 'claims[i]"): a staleness cost
        claimed at the reference lag, where it is 0 by definition."""
        reference_lag = self.reference_lag
        if not self.is_cost or self.lag != reference_lag:
            return []
        return [f"{key}.lag' ({self.name}): a staleness cost is measured against lag {reference_lag}, the grid's "
                "smallest; claim it at a larger lag (a grid of one lag measures none: pass claims=[])"]

    def row(self) -> dict:
        """The claim as summary.json's row holds it: every kind's fields (ROW_FIELDS), None where it has none."""
        return {field: getattr(self, field, None) for field in ROW_FIELDS}

    def _cost(self, recipe: str) -> list[tuple[float, str, int]]:
        return [(1.0, recipe, self.lag), (-1.0, recipe, self.reference_lag)]


@dataclass(frozen=True)
class _Cost(Claim):
    """A staleness cost or a difference of them: marked in staleness.png, named on the cost-against-lag panel."""

    is_cost: ClassVar[bool] = True
    about_lag: ClassVar[bool] = True


@dataclass(frozen=True)
class StalenessCost(_Cost):
    """A recipe's score at ``lag`` minus at the reference lag (the grid's smallest)."""

    kind: ClassVar[str] = "staleness_cost"
    words: ClassVar[str] = "staleness cost of {recipe} (lag {lag} minus lag {reference_lag})"

    def cells(self) -> list[tuple[float, str, int]]:
        return self._cost(self.recipe)


@dataclass(frozen=True)
class _Versus(Claim):
    """A comparison with another recipe, ``versus`` (required by the schema for these kinds)."""

    versus: str = ""

    @classmethod
    def _own(cls, section: dict, grid_lags: tuple[int, ...]) -> dict:
        return {"versus": section["versus"]}


@dataclass(frozen=True)
class CostDifference(_Versus, _Cost):
    """The staleness cost of ``recipe`` minus that of ``versus``."""

    kind: ClassVar[str] = "cost_difference"
    words: ClassVar[str] = "staleness cost of {recipe} minus that of {versus} (lag {lag} minus lag {reference_lag})"

    def cells(self) -> list[tuple[float, str, int]]:
        return [*self._cost(self.recipe), *_negated(self._cost(self.versus))]


@dataclass(frozen=True)
class Recipes(_Versus):
    """Two recipes at one lag: ``recipe`` minus ``versus``."""

    kind: ClassVar[str] = "recipes"
    words: ClassVar[str] = "{recipe} minus {versus} at lag {lag}"

    def cells(self) -> list[tuple[float, str, int]]:
        return [(1.0, self.recipe, self.lag), (-1.0, self.versus, self.lag)]


@dataclass(frozen=True)
class Collapse(_Versus):
    """The collapse rate of ``recipe`` at ``lag`` minus that of ``versus`` at ``versus_lag`` (a rate, not a score)."""

    versus_lag: int = 0
    kind: ClassVar[str] = "collapse"
    words: ClassVar[str] = "collapse rate of {recipe} at lag {lag} minus that of {versus} at lag {versus_lag}"
    scale: ClassVar[str] = "rate"

    @classmethod
    def _own(cls, section: dict, grid_lags: tuple[int, ...]) -> dict:
        return {**super()._own(section, grid_lags), "versus_lag": section.get("versus_lag", section["lag"])}

    def cells(self) -> list[tuple[float, str, int]]:
        return [(1.0, self.recipe, self.lag), (-1.0, self.versus, self.versus_lag)]


@dataclass(frozen=True)
class Interaction(_Versus):
    """(recipe vs versus) minus (other_recipe vs other_versus), each comparison ``of`` a cost difference
    (the default) or two recipes at one lag: e.g. a recipe's gain with a bf16 sampler minus with float32."""

    other_recipe: str = ""
    other_versus: str = ""
    of: str = "cost_difference"
    kind: ClassVar[str] = "interaction"
    words: ClassVar[str] = "{recipe} against {versus} minus {other_recipe} against {other_versus} ({of}, lag {lag})"
    own_fields: ClassVar[tuple[str, ...]] = ("other_recipe", "other_versus", "of")
    about_lag: ClassVar[bool] = True

    @classmethod
    def _own(cls, section: dict, grid_lags: tuple[int, ...]) -> dict:
        return {**super()._own(section, grid_lags), "other_recipe": section["other_recipe"],
                "other_versus": section["other_versus"], "of": section.get("of", "cost_difference")}

    def cells(self) -> list[tuple[float, str, int]]:
        # a difference of differences of differences when the comparison is a cost difference, of
        # differences when it is two recipes
        def inner(a: str, b: str) -> list[tuple[float, str, int]]:
            if self.of == "cost_difference":
                return [*self._cost(a), *_negated(self._cost(b))]
            return [(1.0, a, self.lag), (-1.0, b, self.lag)]
        return [*inner(self.recipe, self.versus), *_negated(inner(self.other_recipe, self.other_versus))]

    def errors(self, key: str) -> list[str]:
        messages = []
        if self.of == "cost_difference" and self.lag == self.reference_lag:
            messages.append(f"{key}.lag' ({self.name}): an interaction of staleness costs is measured against lag "
                            f"{self.reference_lag}, the grid's smallest; claim it at a larger lag")
        if {self.recipe, self.versus} == {self.other_recipe, self.other_versus}:
            messages.append(f"{key}.other_recipe' ({self.name}): the other comparison must name other recipes")
        return messages


@dataclass(frozen=True)
class Trend(Claim):
    """The least-squares slope of ``recipe``'s score against lag over ``lags`` (minus ``versus``'s, if
    given); with a ``threshold`` cost it also reports the smallest lag whose cost passes it
    (analysis.claims.verdicts.threshold_lag)."""

    versus: str | None = None
    lags: tuple[int, ...] = ()  # the lags the slope is fitted over (default: the grid's)
    threshold: float | None = None  # the staleness cost that matters, a fraction of the score (one recipe only)
    kind: ClassVar[str] = "trend"
    words: ClassVar[str] = "least-squares slope of {recipe}'s score against lag over lags {lags} (per unit of lag)"
    own_fields: ClassVar[tuple[str, ...]] = ("lags", "threshold")
    about_lag: ClassVar[bool] = True

    @classmethod
    def from_section(cls, section: dict, grid_lags: tuple[int, ...], reference_lag: int) -> "Claim":
        lags = tuple(section.get("lags") or grid_lags)
        return super().from_section({"lag": max(lags), **section}, grid_lags, reference_lag)  # its lag: the largest of its fit

    @classmethod
    def _own(cls, section: dict, grid_lags: tuple[int, ...]) -> dict:
        return {"versus": section.get("versus"), "lags": tuple(section.get("lags") or grid_lags),
                "threshold": section.get("threshold")}

    def cells(self) -> list[tuple[float, str, int]]:
        slope = [(weight, self.recipe, lag) for weight, lag in slope_weights(self.lags)]
        return slope if self.versus is None else [*slope, *_negated([(w, self.versus, lag) for w, _, lag in slope])]

    def errors(self, key: str) -> list[str]:
        messages = []
        if self.threshold is not None and self.versus is not None:
            messages.append(f"{key}.threshold' ({self.name}): a threshold lag is a cost of one recipe; drop versus "
                            f"or the threshold")
        if len(set(self.lags)) < 2:
            messages.append(f"{key}.lags' ({self.name}): a slope needs two lags or more, got {list(self.lags)}")
        return messages


KINDS: dict[str, type[Claim]] = {cls.kind: cls for cls in
                                  (StalenessCost, CostDifference, Recipes, Collapse, Interaction, Trend)}
# the config fields only one kind has, and that kind (a field on another kind is refused, naming it)
OWN_FIELD_KINDS = {field: cls.kind for cls in KINDS.values() for field in cls.own_fields}


def _negated(cells: list[tuple[float, str, int]]) -> list[tuple[float, str, int]]:
    return [(-weight, recipe, lag) for weight, recipe, lag in cells]


def slope_weights(lags) -> list[tuple[float, int]]:
    """(weight, lag) of the ordinary least-squares slope of a score against lag: the slope
    sum (L - mean) y_L / sum (L - mean)^2 is the linear contrast of the cell means with these
    weights (they sum to 0, so a staleness cost's slope is the score's: the reference cell drops out)."""
    lags = sorted(int(lag) for lag in lags)
    mean = sum(lags) / len(lags)
    spread = sum((lag - mean) ** 2 for lag in lags)
    return [((lag - mean) / spread, lag) for lag in lags]


def claims(config: dict) -> tuple[Claim, ...]:
    """The checked config's claims, typed."""
    return tuple(Claim.build(section, config["lags"]) for section in config.get("claims") or [])


def claim_errors(config: dict, recipes) -> list[str]:
    """Claims that name a recipe that exists nowhere (``recipes``: every recipe name the config can
    use) or a lag that is not one, repeat a name, or compare a staleness cost at the reference lag
    (the grid's smallest, where it is 0 by definition). A real recipe or lag that this grid leaves
    out (narrowed with -C recipes=... lags=...) is no error: the claim is reported as not tested."""
    messages, names = [], set()
    for i, claim in enumerate(claims(config)):
        key, section = f"config key 'claims[{i}]", config["claims"][i]
        if claim.name in names:
            messages.append(f"{key}.name': {claim.name!r} is declared twice")
        names.add(claim.name)
        for field in ("recipe", "versus", "other_recipe", "other_versus"):
            value = getattr(claim, field, None)
            if value is not None and value not in recipes:
                messages.append(f"{key}.{field}' ({claim.name}): unknown recipe {value!r}"
                                f"{nearest(value, recipes)}; available: {', '.join(sorted(recipes))}")
        lags = [("lag", claim.lag), ("versus_lag", getattr(claim, "versus_lag", None))]
        lags += [(f"lags[{j}]", lag) for j, lag in enumerate(section.get("lags") or [])]
        for field, value in lags:
            if value is not None and value < 0:
                messages.append(f"{key}.{field}' ({claim.name}): {value!r} is not a lag (an integer >= 0)")
        messages += [f"{key}.{field}' ({claim.name}): only a{'n' if kind[0] in 'aeiou' else ''} {kind} claim has it"
                     for field, kind in OWN_FIELD_KINDS.items() if field in section and claim.kind != kind]
        messages += claim.errors(key)
        if "planning_spread" in section and claim.scale == "rate":
            messages.append(f"{key}.planning_spread' ({claim.name}): a spread of per-seed contrasts is a score's; "
                            "a collapse claim has none")
        if "versus_lag" in section and not isinstance(claim, Collapse):
            messages.append(f"{key}.versus_lag' ({claim.name}): only a collapse claim compares two lags")
        if claim.scale == "points" and claim.metric == "selected" and not config["eval"].get("selection_task"):
            messages.append(f"{key}.metric' ({claim.name}): 'selected' needs eval.selection_task")
    return messages

"""The config's claims and their seed schedule, typed: the ``claims`` and ``seeding`` sections
(analysis.claims answers them; docs/statistics.md). Self-contained: defaults live in the schema,
the tests in analysis/; harness.config calls claim_errors and seeding_errors among its semantic
checks, so a claim naming no recipe, or looks that do not increase, stop before any job runs.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Seeding:
    """The config's ``seeding`` section: the declared seed schedule of the claims (analysis.claims)."""

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


def seeding_errors(config: dict) -> list[str]:
    """A schedule whose looks do not increase."""
    looks = (config.get("seeding") or {}).get("looks", [])
    if any(b <= a for a, b in zip(looks, looks[1:])):
        return [f"config key 'seeding.looks': {list(looks)} must increase"]
    return []


@dataclass(frozen=True)
class Claim:
    """One declared claim: a comparison, its endpoint and the smallest effect that matters."""

    name: str  # unique label, the claim's row in table.md / table.csv / summary.json
    kind: str  # staleness_cost | cost_difference | recipes | collapse | interaction | trend
    recipe: str
    lag: int
    expect: str  # greater | less | equivalent: the claimed sign of the contrast, or |contrast| < margin
    smallest_effect: float  # fraction of the score (or of the collapse rate; trend: per unit of lag)
    metric: str  # auc | fixed | best | selected (unused by collapse claims)
    versus: str | None  # the other recipe; None for staleness_cost (and a trend of one recipe)
    versus_lag: int | None  # collapse only: the other cell's lag (default: lag)
    # interaction only: the same comparison made with other recipes (e.g. the float32-sampler twins
    # of recipe and versus), and which comparison it is: cost_difference (the default) or recipes
    other_recipe: str | None = None
    other_versus: str | None = None
    of: str | None = None
    lags: tuple[int, ...] | None = None  # trend only: the lags the slope is fitted over (default: the grid's)
    # trend of one recipe only: the staleness cost that matters (fraction of the score); the claim then
    # also reports the smallest lag whose cost passes it, with an interval (analysis.claims.threshold_lag)
    threshold: float | None = None

    @classmethod
    def build(cls, section: dict, grid_lags=()) -> "Claim":
        kind = section["kind"]
        versus_lag = section.get("versus_lag", section["lag"]) if kind == "collapse" else None
        lags = tuple(section.get("lags") or grid_lags) if kind == "trend" else None
        lag = section["lag"] if "lag" in section else max(lags)  # a trend's lag: the largest of its fit
        return cls(name=section["name"], kind=kind, recipe=section["recipe"], lag=lag,
                   expect=section["expect"], smallest_effect=float(section["smallest_effect"]),
                   metric=section["metric"], versus=section.get("versus"), versus_lag=versus_lag,
                   other_recipe=section.get("other_recipe"), other_versus=section.get("other_versus"),
                   of=section.get("of", "cost_difference") if kind == "interaction" else None, lags=lags,
                   threshold=section.get("threshold"))

    def cells(self, reference_lag: int) -> list[tuple[float, str, int]]:
        """(weight, recipe, lag) of the cells whose weighted seed means make the contrast."""
        if self.kind == "staleness_cost":
            return [(1.0, self.recipe, self.lag), (-1.0, self.recipe, reference_lag)]
        if self.kind == "cost_difference":
            return [*self._cost(self.recipe, reference_lag), *_negated(self._cost(self.versus, reference_lag))]
        if self.kind == "interaction":
            # (recipe vs versus) minus (other_recipe vs other_versus): a difference of differences of
            # differences when the comparison is a cost difference, of differences when it is two recipes
            inner = (lambda a, b: [*self._cost(a, reference_lag), *_negated(self._cost(b, reference_lag))]) \
                if self.of == "cost_difference" else (lambda a, b: [(1.0, a, self.lag), (-1.0, b, self.lag)])
            return [*inner(self.recipe, self.versus), *_negated(inner(self.other_recipe, self.other_versus))]
        if self.kind == "trend":
            slope = [(weight, self.recipe, lag) for weight, lag in slope_weights(self.lags)]
            return slope if self.versus is None else \
                [*slope, *_negated([(w, self.versus, lag) for w, _, lag in slope])]
        return [(1.0, self.recipe, self.lag), (-1.0, self.versus, self.versus_lag or self.lag)]

    def _cost(self, recipe: str, reference_lag: int) -> list[tuple[float, str, int]]:
        return [(1.0, recipe, self.lag), (-1.0, recipe, reference_lag)]


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
    reference_lag = min(config["lags"])
    for i, claim in enumerate(claims(config)):
        key = f"config key 'claims[{i}]"
        if claim.name in names:
            messages.append(f"{key}.name': {claim.name!r} is declared twice")
        names.add(claim.name)
        for field in ("recipe", "versus", "other_recipe", "other_versus"):
            value = getattr(claim, field)
            if value is not None and value not in recipes:
                messages.append(f"{key}.{field}' ({claim.name}): unknown recipe {value!r}; "
                                f"available: {', '.join(sorted(recipes))}")
        lags = [("lag", claim.lag), ("versus_lag", claim.versus_lag)]
        lags += [(f"lags[{j}]", lag) for j, lag in enumerate(config["claims"][i].get("lags") or [])]
        for field, value in lags:
            if value is not None and value < 0:
                messages.append(f"{key}.{field}' ({claim.name}): {value!r} is not a lag (an integer >= 0)")
        messages += _kind_errors(claim, config["claims"][i], key, reference_lag)
        if claim.kind in ("staleness_cost", "cost_difference") and claim.lag == reference_lag:
            messages.append(f"{key}.lag' ({claim.name}): a staleness cost is measured against lag "
                            f"{reference_lag}, the grid's smallest; claim it at a larger lag (a grid of "
                            "one lag measures none: pass claims=[])")
        if claim.kind != "collapse" and "versus_lag" in config["claims"][i]:
            messages.append(f"{key}.versus_lag' ({claim.name}): only a collapse claim compares two lags")
        if claim.kind != "collapse" and claim.metric == "selected" and not config["eval"].get("selection_task"):
            messages.append(f"{key}.metric' ({claim.name}): 'selected' needs eval.selection_task")
    return messages


_KIND_ONLY = {"other_recipe": "interaction", "other_versus": "interaction", "of": "interaction", "lags": "trend",
              "threshold": "trend"}


def _kind_errors(claim: Claim, section: dict, key: str, reference_lag: int) -> list[str]:
    """The fields of the interaction and trend kinds: each on its own kind only; an interaction of
    cost differences away from the reference lag; a trend over two lags or more."""
    messages = [f"{key}.{field}' ({claim.name}): only a{'n' if kind[0] in 'aeiou' else ''} {kind} claim has it"
                for field, kind in _KIND_ONLY.items() if field in section and claim.kind != kind]
    if claim.kind == "interaction" and claim.of == "cost_difference" and claim.lag == reference_lag:
        messages.append(f"{key}.lag' ({claim.name}): an interaction of staleness costs is measured against lag "
                        f"{reference_lag}, the grid's smallest; claim it at a larger lag")
    if claim.kind == "interaction" and {claim.recipe, claim.versus} == {claim.other_recipe, claim.other_versus}:
        messages.append(f"{key}.other_recipe' ({claim.name}): the other comparison must name other recipes")
    if claim.kind == "trend" and claim.threshold is not None and claim.versus is not None:
        messages.append(f"{key}.threshold' ({claim.name}): a threshold lag is a cost of one recipe; drop versus "
                        f"or the threshold")
    if claim.kind == "trend" and len(set(claim.lags)) < 2:
        messages.append(f"{key}.lags' ({claim.name}): a slope needs two lags or more, got {list(claim.lags)}")
    return messages

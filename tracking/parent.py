"""The grid's parent run's texts (tracking.runs.Tracker): its claims' verdicts as tags and its description (table.md's
claims table), the report page (verdicts.md: the claims short, the views and samples one click away), and a tuning
grid's pick (tuning.md)."""
from __future__ import annotations

from analysis.claims.summary_file import Summary
from analysis.report.render import Section, Table, markdown
from analysis.report.tables import (
    claim_conclusions,
    claim_text,
    claims_section,
    family_text,
    replication_text,
    verdict_counts,
)
from tracking.store import TUNING_SUFFIX


def claim_tags(summary: Summary) -> dict[str, str]:
    """The claims' verdicts as the parent run's tags, and its description: the claims table of
    table.md (or why there is none)."""
    claims = summary.claims
    tags = {f"claim.{c.claim.name}": c.verdict for c in claims}
    tags.update({f"claim.{c.claim.name}.estimate": claim_text(c) for c in claims})
    tags.update({f"claim.{c.claim.name}.replication": replication_text(c) for c in claims})
    tags["claims"] = verdict_counts(claims) or "none declared"
    section = claims_section(summary)
    tags["mlflow.note.content"] = "\n".join(markdown([section])) if section else claim_conclusions(summary)[0]
    return tags


def tuning_markdown(grid: str, pick: dict) -> str:
    """The parent run's pick table (tuning.md): per recipe the tuned parameter, its candidates, the
    picked value and the recipe name its confirmation runs carry (params.recipe), and the rule. No
    tuning score: as in table.md, the best of several noisy scores is biased upward (the winner's
    curse, docs/statistics.md); the scores stay in tuning.json, the pick's input."""
    rows = [[recipe, ", ".join(entry["param"]), ", ".join(map(str, entry["values"])), str(entry["picked"]),
             entry["variant"]] for recipe, entry in pick["recipes"].items()]
    header = ["recipe", "parameter", "candidates", "picked", "confirmation runs' recipe"]
    rule = (f"Each recipe's value was picked on tuning seeds {pick['seeds']} by the {pick['metric']} averaged over "
        f"lags {pick['lags']}: {pick['rule']}. The candidates' runs are in the experiment '{grid}{TUNING_SUFFIX}'; "
        "their scores are the pick's input (tuning.json), not results. The picked values' results are their runs "
        f"on the confirmation seeds, in the experiment '{grid}' (table.md).")
    return "\n".join(markdown([Section(f"Equal tuning budget of grid {grid}: the pick", (Table.of(header, rows), rule))]))


def report_markdown(summary: Summary, views: list[tuple[str, list[tuple[str, str]]]],
                    samples: list[tuple[str, list[tuple[str, str]]]] | None) -> str:
    """The grid's report page (the parent run's verdicts.md, which the UI opens first): the claims table short enough
    for a 1440x900 screen, a row per claim with its outcome, its estimate with its interval and P(same outcome on a
    rerun) (the statements and what each outcome means: table.md, the run's description); then the views one click
    away, ``views``: (what, [(label, link)]), and the collapsed runs' sampled completions beside their cell,
    ``samples``: (cell, [(seed, link)]), None where no run keeps samples; without claims, why there are none."""
    claims = summary.claims
    lines = [f"### Claims of grid {summary.grid}", ""]  # one line: the table on the first screen
    if claims:
        rows = [[c.claim.name, f"**{c.verdict}**", claim_text(c), replication_text(c, with_range=True)] for c in claims]
        # short headers: a 1440 px window beside the UI's assistant shows four columns whole
        lines += markdown([Section.table("", ["claim", "outcome", "estimate [interval]", "P(rerun agrees)"], rows)])[2:]
    else:
        lines += claim_conclusions(summary)
    lines += ["", f"Estimates with their interval's level, method and n; P(rerun agrees): the probability that a rerun "
              f"of the design gives the same outcome, with its 80% range. Read as {family_text(summary)}. Statements and "
              "what each outcome means: table.md (beside this file) and this run's description.", ""]
    lines += [f"- **{what}**: " + " · ".join(f"[{label}]({link})" for label, link in links) for what, links in views]
    if samples:
        lines += ["- **Collapsed runs' sampled completions**: " + "; ".join(
            f"{cell} " + ", ".join(f"[{seed}]({link})" for seed, link in seeds) for cell, seeds in samples)]
    elif samples is not None:
        lines += ["- **Sampled completions**: no run collapsed; each seed run's are its table samples.json (Artifacts)"]
    return "\n".join(lines) + "\n"

"""The grid's parent run's texts (tracking.runs.Tracker.sync_parent): its claims' verdicts as tags and as the claims
table (verdicts.md), and a tuning grid's pick (tuning.md)."""
from __future__ import annotations

from analysis.report.render import Section, Table, markdown
from analysis.report.tables import claim_conclusions, claim_text, claims_section, replication_text
from tracking.store import TUNING_SUFFIX


def claim_tags(summary: dict) -> dict[str, str]:
    """The claims' verdicts as the parent run's tags, and its description: the claims table of
    table.md (or why there is none)."""
    claims = summary["claims"]
    tags = {f"claim.{c['name']}": c["verdict"] for c in claims}
    tags.update({f"claim.{c['name']}.estimate": claim_text(c) for c in claims})
    tags.update({f"claim.{c['name']}.replication": replication_text(c) for c in claims})
    verdicts = [c["verdict"] for c in claims]
    tags["claims"] = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts)) or "none declared"
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


def verdicts_markdown(summary: dict) -> str:
    """The parent run's claims table, table.md's (analysis.report.tables.claims_section): a row per claim, its
    full name, its statement, its estimate, its outcome with what that outcome means, and P(same outcome on a
    rerun); without claims, why there are none."""
    section = claims_section(summary)
    if section is None:
        return "\n".join(claim_conclusions(summary)) + "\n"
    return "\n".join(markdown([section]))

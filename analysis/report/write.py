"""Write a finished grid's reports into <results_dir>/<grid> (docs/design.md), each atomically:
table.md / table.csv / table.tex (analysis.report.tables: the claims' verdicts first, then rows =
recipes, columns = lags), curves.png, mismatch.png, dynamics.png
(analysis.report.dynamics), collapse.png (Kaplan-Meier), staleness.png,
pareto.png and lag_vs_length.png (a queue grid's; a text panel for any other: analysis.report.plots),
job_times.json (the jobs' wall times and the noise plans priced by them) and summary.json
(analysis.cells.summary, with the generated conclusions; nothing timed, so the same runs give its same bytes). With config side_by_side, table.md
and summary.json also show another grid's claims beside this one's (analysis.report.compare)."""
from __future__ import annotations

import dataclasses

from analysis.cells.summary import collect, summarize_cells
from analysis.claims.gain_sources import gain_sources
from analysis.claims.robustness import checked
from analysis.claims.summary_file import Summary, as_written, json_safe, write_summary
from analysis.claims.verdicts import answer
from analysis.report import machines as provenance
from analysis.report.compare import beside, beside_sections, load_beside
from analysis.report.dynamics import plot_dynamics
from analysis.report.plots import (
    plot_collapse,
    plot_curves,
    plot_mismatch,
    plot_pareto,
    plot_queue_lags,
    plot_staleness,
)
from analysis.report.render import Section
from analysis.report.sections import gain_sources_sections, noise_sections, pareto_sections, tuning_sections
from analysis.report.tables import (
    cell_sections,
    claims_section,
    conclusions,
    conclusions_section,
    render_csv,
    render_latex,
    render_markdown,
)
from analysis.schedule.looks import scheduled_runs
from analysis.schedule.tune import confirmation_view
from grid.folder import QUEUE_PLOTS, GridDir
from grid.settings import Config
from harness.io import write_json_atomic, write_text_atomic


def summarize(config: Config, runs: list) -> Summary:
    """The machine-readable summary (summary.json): the cells (analysis.cells.summary), the claims'
    outcomes read from them (``claims``, analysis.claims.verdicts: each from its interval at alpha / the
    claims declared, over the looks of the seed schedule) and where each recipe's gain comes from
    (``gain_sources``, analysis.claims.gain_sources). write_reports adds the generated conclusions."""
    summary, cells = summarize_cells(config, runs)
    claims = as_written(checked(config.family, cells, answer(config.family, cells)))
    # no P(every outcome again): the product of the claims' probabilities read 0.62 where reruns of the
    # design, whose claims share cells, gave every outcome again 0.84 of the time (issue 63), and a joint
    # simulation is not calibrated yet
    return dataclasses.replace(summary, claims=claims, gain_sources=json_safe(gain_sources(config, cells)))


def report_sections(config: Config, summary: Summary) -> list[Section]:
    """table.md's and table.tex's sections, in order: the claims and where each gain comes from, the cell
    tables, the exploratory noise and queue sections, the conclusions, the tuning pick, a grid beside this
    one, then what the runs ran on and what they cost."""
    claims = claims_section(summary)
    return [*([claims] if claims else []), *gain_sources_sections(summary), *cell_sections(summary),
            *noise_sections(summary), *pareto_sections(summary), conclusions_section(summary),
            *tuning_sections(summary), *beside_sections(summary), *provenance.sections(config),
            *queue_plots_sections(config)]


def queue_plots_sections(config: Config) -> list[Section]:
    """The last section where a queue grid's plots are not drawn: which and why (no placeholder image)."""
    if config.lag_mode == "queue":
        return []
    return [Section("Plots not drawn", (f"{' and '.join(f'{name}.png' for name in QUEUE_PLOTS)} compare a queue grid's "
                    f"bounds at equal modelled wall-clock (lag_mode queue; docs/statistics.md); this grid's lag_mode is "
                    f"{config.lag_mode}.",))]


def write_reports(config: Config, out: GridDir | None = None, progress: bool = True) -> Summary:
    """Read the grid, write every report file into ``out`` (default: the grid's folder); returns the summary."""
    import matplotlib
    matplotlib.use("Agg")  # files only: no display on a cluster node or in CI
    grid = out or config.folder
    other = load_beside(config)  # first: a grid to show beside this one that is not there fails before the work
    grid.path.mkdir(parents=True, exist_ok=True)
    # with a tuning section: the confirmation grid of the picked values (analysis.schedule.tune), and the pick
    config, summary_tuning = confirmation_view(config)
    runs = collect(config, progress=progress, which=scheduled_runs(config))
    summary = summarize(config, runs)
    summary = dataclasses.replace(summary, tuning=summary_tuning)
    summary = dataclasses.replace(summary, side_by_side=None if other is None else beside(summary, other))
    summary = dataclasses.replace(summary, conclusions=conclusions(summary))
    # then what the runs ran on and what they cost (analysis.report.machines)
    report = report_sections(config, summary)
    write_text_atomic(grid.table_path("md"), render_markdown(summary, report))
    write_text_atomic(grid.table_path("csv"), render_csv(summary))
    write_text_atomic(grid.table_path("tex"), render_latex(summary, report))
    plot_curves(config, runs, grid.plot_path("curves"))
    plot_mismatch(config, runs, grid.plot_path("mismatch"))
    plot_dynamics(config, runs, grid.plot_path("dynamics"))
    plot_collapse(summary, grid.plot_path("collapse"))
    plot_staleness(summary, grid.plot_path("staleness"))
    if config.lag_mode == "queue":
        plot_pareto(summary, grid.plot_path("pareto"))
        plot_queue_lags(config, runs, grid.plot_path("lag_vs_length"))
    for name in QUEUE_PLOTS if config.lag_mode != "queue" else ():
        grid.plot_path(name).unlink(missing_ok=True)  # an earlier aggregate's of this folder: not this grid's
    # what rests on the jobs' wall times in a file of its own: summary.json the same bytes for the same runs
    write_json_atomic(grid.job_times_path, {"job_costs": config.folder.job_costs(), "noise_plans": summary.noise["plans"]})
    untimed = dataclasses.replace(summary, noise={key: value for key, value in summary.noise.items() if key != "plans"})
    write_summary(grid.summary_path, untimed)  # last: its presence means the reports are complete
    return summary

# The runs each job needs under the seed schedule (config seeding, analysis.schedule.looks), functions only, so
# that the rule files stay thin. Each later look's runs are the output of the interim job of the look
# before it (checkpoint look, aggregate.smk).
LOOKS = len(MODEL.seeding.looks) if MODEL.seeding else 1
# An equal tuning budget (config tuning, analysis.schedule.tune): the candidates' runs on the tuning seeds,
# then the picked values' on the grid's seeds, which the grid-wide pick names (checkpoint tune), look by
# look under a seed schedule as any grid's.
TUNING = MODEL.tuning


def run_outputs(runs):
    """The runs' training status and scores (one evaluate job per run writes all its tasks')."""
    wildcards = dict(zip(("recipe", "lag", "seed"), zip(*runs))) if runs else {"recipe": [], "lag": [], "seed": []}
    return expand(f"{RUN}/{STATUS_PATTERN}", zip, **wildcards) + [
        path for task in TASKS for path in expand(f"{RUN}/{eval_file_pattern(task)}", zip, **wildcards)]


def scheduled_outputs(through):
    """The outputs of the runs of looks 1..through of the seed schedule (a fixed design: every run):
    each later look's runs are what the interim job of the look before wrote (checkpoint look).
    Targets of `all` too: Snakemake reruns no job whose outputs exist because an input went missing,
    so a deleted run is redone only if it is a target. With a tuning section: the tuning runs, then
    those of the confirmation grid of the picked values (Config.confirmation), whose looks these are."""
    model, runs = MODEL, []
    if TUNING is not None:
        with open(checkpoints.tune.get().output[0]) as tuned:
            picked = {recipe: entry["picked"] for recipe, entry in json.load(tuned)["recipes"].items()}
        model, runs = MODEL.confirmation(picked), TUNING.runs()
    runs += model.first_look()
    for look in range(1, through):
        with open(checkpoints.look.get(look=look).output[0]) as interim:
            runs += [tuple(run) for run in json.load(interim)["next_runs"]]
    return run_outputs(runs)

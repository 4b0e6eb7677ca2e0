"""Do the tests catch a wrong claim? Each mutant is a small text patch to one file (a bug a person
could write); it is applied to a copy of the tree in a temporary folder (never to the checkout, and
without .git: the suite's tree check says so and goes on), the tests that cover it run there, and
the first test that fails is the one that kills it. A mutant no test kills SURVIVED.

    .venv/bin/python benchmarks/mutants.py                # every mutant
    .venv/bin/python benchmarks/mutants.py --only p50_as_p60 --only digest_ignores_metrics

The first five are the survivors issue 37 found; the next four guard that issue's own fixes; the last
seven are issue 47's: bugs in the printed numbers (a replication probability from the standard error or
without the effect's uncertainty, "exceeds" as low > delta, every look reading look 1, a family that
shrinks with a narrowed grid, boundaries from 200,000 draws, lag_mode left out of the run key). A patch
that no longer applies (the code moved) is reported as such, not as a kill.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.workflow_cli import copy_checkout

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the tree
    old: str  # must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest node ids or files that cover it
    env: dict = field(default_factory=dict)


MUTANTS = [
    Mutant("cost_difference_signs_flipped", "grid/claims.py",
           "return [*self._cost(self.recipe), *_negated(self._cost(self.versus))]",
           "return [*_negated(self._cost(self.recipe)), *self._cost(self.versus)]",
           ("tests/analysis/test_claims_by_hand.py",)),
    Mutant("claim_tost_margin_doubled", "analysis/claims/verdicts.py",
           "name = outcome(low, high, claim.smallest_effect, claim.expect)",
           "name = outcome(low, high, 2 * claim.smallest_effect, claim.expect)",
           ("tests/analysis/test_claims_by_hand.py",)),
    Mutant("slime_job_skips_the_lag_bound", "engines/slime/metrics.py",
           "record = checked_rollout_record(args, rollout_id)  # every rank",
           "record = rollout_record(args, rollout_id)  # every rank",
           ("tests/engines/slime/test_slime_distributed.py",)),
    Mutant("digest_ignores_metrics", "stabilizers/_fingerprint.py",
           'return {**parts, "digest": _digest(parts)}',
           'return {**parts, "digest": _digest({k: v for k, v in parts.items() if k != "metrics"})}',
           ("tests/stabilizers/test_stabilizers_fingerprint.py",)),
    Mutant("p50_as_p60", "engines/mismatch.py", "QUANTILES = (0.5, 0.9, 0.99)", "QUANTILES = (0.6, 0.9, 0.99)",
           ("tests/engines/slime/test_slime_metrics.py",)),
    # this fixes
    Mutant("checkpoint_not_republished_from_the_resume_state", "engines/tiny/trainer.py",
           'if meta.get("checkpoint") and step not in self.run_dir.checkpoints():',
           "if False:",
           ("tests/engines/tiny/test_tiny_train.py::test_kill_9_at_every_write_of_a_run_then_resume_is_bit_identical",)),
    Mutant("killed_writes_temp_files_kept", "engines/train.py",
           "        run.remove_train_temp_files()", "        pass",
           ("tests/engines/tiny/test_tiny_train.py::test_kill_9_at_every_write_of_a_run_then_resume_is_bit_identical",)),
    Mutant("run_identity_ignores_the_key", "harness/run.py",
           "if run_key(existing) == wanted:", "if True:",
           ("tests/harness/test_identity.py::test_a_finished_run_of_another_key_is_refused_by_name_before_any_job",)),
    Mutant("workflow_skips_the_identity_check", "workflow/rules/common.smk",
           "    if workflow.is_main_process:\n        refuse_changed_runs(",
           "    if False:\n        refuse_changed_runs(",
           ("tests/harness/test_identity.py::test_the_workflow_refuses_a_changed_grid_before_any_job_without_snakemake_metadata",)),
    # issue 47's: a wrong number the suite could not tell from a right one
    Mutant("replication_from_the_standard_error", "analysis/claims/verdicts.py",
           "contrast_agreement(decided.estimate, decided.spread, decided.se",
           "contrast_agreement(decided.estimate, decided.se, decided.se",
           ("tests/analysis/test_replication.py::test_the_replication_probability_of_a_fixed_design_by_hand",)),
    Mutant("replication_ignores_the_effects_uncertainty", "analysis/statistics/predictive.py",
           "return estimate + scale * rng.standard_normal(size), sigma",
           "return estimate + 0 * rng.standard_normal(size), spread + 0 * sigma",
           ("tests/analysis/test_replication.py::test_the_replication_probability_of_a_fixed_design_by_hand",)),
    Mutant("exceeds_strictly_above_delta", "analysis/statistics/decision.py",
           'cases = {"exceeds": low >= delta,', 'cases = {"exceeds": low > delta,',
           ("tests/analysis/test_claims.py::test_the_outcome_is_where_the_interval_lies",)),
    Mutant("every_look_reads_look_one", "analysis/claims/verdicts.py",
           "measured = measure(claim, cells, budget, set(schedule.seeds[:n]))",
           "measured = measure(claim, cells, budget, set(schedule.seeds[:schedule.looks[0]]))",
           ("tests/analysis/test_claims.py::test_a_three_look_schedule_reads_each_look_on_its_own_seeds_and_level",)),
    Mutant("family_shrinks_with_the_grid", "analysis/claims/verdicts.py",
           "return tested, Schedule.build(seeding, seeds, len(claims))",
           "return tested, Schedule.build(seeding, seeds, len(tested))",
           ("tests/analysis/test_claims.py::test_a_grid_narrowed_to_one_of_two_claims_reads_it_at_the_declared_level",)),
    Mutant("boundaries_from_200000_draws", "analysis/statistics/boundaries.py",
           "DRAWS = 10_000_000", "DRAWS = 200_000", ("tests/analysis/test_boundaries.py",)),
    Mutant("lag_mode_left_out_of_the_run_key", "grid/expand.py",
           '        "lag_mode": config["lag_mode"],\n', "",
           ("tests/harness/test_identity.py::test_every_field_of_the_run_config_is_in_the_run_key",)),
]


def apply(tree: Path, mutant: Mutant) -> str | None:
    """Patch the copy; None when applied, else why not."""
    path = tree / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return f"the patch does not apply: {mutant.old!r} occurs {text.count(mutant.old)} times in {mutant.path}"
    path.write_text(text.replace(mutant.old, mutant.new))
    return None


def run_tests(tree: Path, mutant: Mutant) -> tuple[str, float]:
    """(the first failing test, or SURVIVED), seconds."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE",
                             "-W", "ignore::UserWarning", *mutant.tests],
                            cwd=tree, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tree), **mutant.env})
    seconds = time.perf_counter() - start
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", result.stdout, re.MULTILINE)
    if result.returncode == 0:
        return "SURVIVED", seconds
    if failed:
        return f"killed by {failed[0]}", seconds
    return f"killed? pytest exited {result.returncode} without a failed test: {result.stdout[-500:]}", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=[m.name for m in MUTANTS], help="run only these")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    survivors = unapplied = 0
    with tempfile.TemporaryDirectory(prefix="stalebench-mutants-") as folder:
        pristine = copy_checkout(Path(folder) / "pristine")  # the working tree, without .git
        # first the covering tests on the unpatched copy: a kill must be the mutant's, not the copy's
        tests = tuple(dict.fromkeys(test for mutant in chosen for test in mutant.tests))
        (pristine / ".venv").symlink_to(ROOT / ".venv")
        verdict, seconds = run_tests(pristine, Mutant("unpatched", "", "", "", tests))
        print(f"{'(none: the unpatched copy)':52s} {'':28s} {'passes' if verdict == 'SURVIVED' else verdict} "
              f"({seconds:.0f} s)", flush=True)
        if verdict != "SURVIVED":
            return 2
        (pristine / ".venv").unlink()
        for mutant in chosen:
            tree = Path(folder) / mutant.name
            shutil.copytree(pristine, tree)
            (tree / ".venv").symlink_to(ROOT / ".venv")
            problem = apply(tree, mutant)
            verdict, seconds = (problem, 0.0) if problem else run_tests(tree, mutant)
            survivors += verdict == "SURVIVED"
            unapplied += bool(problem)  # a patch that no longer applies kills nothing: the list needs mending
            print(f"{mutant.name:52s} {mutant.path:28s} {verdict} ({seconds:.0f} s)", flush=True)
            shutil.rmtree(tree)
    print(f"{len(chosen) - survivors - unapplied} of {len(chosen)} mutants killed"
          + (f"; {unapplied} patches no longer apply" if unapplied else ""))
    return 1 if survivors or unapplied else 0


if __name__ == "__main__":
    sys.exit(main())

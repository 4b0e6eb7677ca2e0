"""analysis.statistics.noise_parts and analysis.cells.noise: the seed / evaluation split against a table worked by hand and against statsmodels'
MixedLM (REML), the planning of seeds vs k worked by hand, the expected maximum of normals against
its closed forms and a binomial simulation, and the report section on a fabricated grid."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats

from analysis.cells import noise
from analysis.cells.summary import collect
from analysis.claims.summary_file import Summary
from analysis.report.sections import noise_sections
from analysis.statistics.contrasts import seeds_needed, seeds_needed_equivalence
from analysis.statistics.noise_parts import (
    NoiseParts,
    contrast_spread,
    decompose,
    expected_max_normal,
    interval,
    plan,
    selection_inflation,
    t_test_detects,
    tost_shows_equivalence,
)
from grid.config import validate
from grid.settings import Config
from tests.support.grid_fixture import make_grid


def test_decompose_by_hand():
    # counts / k, k = 4: X = [[1, 0.25], [0.5, 0.25]]; grand 0.5, rows 0.625 0.375, columns 0.75 0.25
    # MS_seed = 2 (0.125^2 + 0.125^2) = 0.0625; MS_problem = 2 (0.25^2 + 0.25^2) = 0.25
    # residuals +-0.125 in a checkerboard: MS_residual = 4 x 0.015625 / 1 = 0.0625
    # tau2 = mean x (1 - x) x k / (k - 1) = (0 + 0.1875 + 0.25 + 0.1875) / 4 x 4 / 3 = 0.2083333
    # seed = (0.0625 - 0.0625) / 2 = 0; seed x problem = 0.0625 - tau2 / 4 = 0.0104167; problem = (0.25 - 0.0625) / 2
    parts = decompose([[4, 1], [2, 1]], k=4)
    assert (parts.ms_seed, parts.ms_problem, parts.ms_residual) == pytest.approx((0.0625, 0.25, 0.0625))
    assert parts.sample == pytest.approx(0.625 / 3)
    assert (parts.seed, parts.seed_problem, parts.problem) == pytest.approx((0.0, 0.0625 - 0.625 / 12, 0.09375))
    assert (parts.seed_part, parts.k_part(), parts.problem_part) == pytest.approx(
        ((0.0625 - 0.625 / 12) / 2, 0.625 / 24, 0.046875))
    # over the seeds: Var = MS_seed / (S P) = 0.015625, 1 df; over problems too:
    # (0.0625 + 0.25 - 0.0625) / 4 = 0.0625 with Satterthwaite df 0.25^2 / (3 x ... ) = 0.0625 / 0.0703125
    seeds = interval(parts, over_problems=False)
    assert seeds["high"] - seeds["estimate"] == pytest.approx(stats.t.ppf(0.975, 1) * 0.125)
    both = interval(parts)
    assert both["df"] == pytest.approx(0.0625 / 0.0703125)
    assert both["high"] - both["estimate"] == pytest.approx(stats.t.ppf(0.975, 0.0625 / 0.0703125) * 0.25)
    shares = both["shares"]
    total = parts.seed_part / 2 + parts.k_part() / 2 + parts.problem_part
    assert shares == pytest.approx({"seed": parts.seed_part / 2 / total, "k": parts.k_part() / 2 / total,
                                    "problem": parts.problem_part / total})


def simulated_table(rng, seeds=6, problems=8, k=16, sd=(0.08, 0.12, 0.05)):
    """Correct counts from the model: p = 0.5 + seed + problem + seed x problem effects (normal)."""
    a = rng.normal(0, sd[0], (seeds, 1))
    u = rng.normal(0, sd[1], (1, problems))
    au = rng.normal(0, sd[2], (seeds, problems))
    p = np.clip(0.5 + a + u + au, 0.01, 0.99)
    return rng.binomial(k, p), p


def test_the_seed_component_is_mixedlm_reml():
    """With the problems as fixed effects and a random intercept per seed, REML's seed variance and
    residual variance are the ANOVA's (seed, seed x problem + tau2 / k) on a balanced table."""
    counts, _ = simulated_table(np.random.default_rng(3))
    parts = decompose(counts, k=16)
    data = pd.DataFrame([{"x": c / 16, "seed": s, "problem": p} for (s, p), c in np.ndenumerate(counts)])
    fit = smf.mixedlm("x ~ C(problem)", data, groups=data["seed"]).fit(reml=True)
    assert parts.seed > 0
    assert float(fit.cov_re.iloc[0, 0]) == pytest.approx(parts.seed, rel=1e-4)
    assert fit.scale == pytest.approx(parts.ms_residual, rel=1e-4)


def test_a_runs_score_variance_is_the_seed_part_plus_the_k_part():
    """Over simulated tables: the seeds' sample variance of run scores (computed here, not by the code)
    and the code's seed part + k part estimate the same thing, and the code's k part is the binomial
    variance of the true p's."""
    rng = np.random.default_rng(11)
    spread, estimated, k_true, k_est = [], [], [], []
    for _ in range(400):
        counts, p = simulated_table(rng, seeds=8, problems=20, k=8)
        parts = decompose(counts, k=8)
        spread.append(np.var(counts.mean(1) / 8, ddof=1))
        estimated.append(parts.seed_part + parts.k_part())
        k_true.append((p * (1 - p)).mean() / (8 * 20))
        k_est.append(parts.k_part())
    assert np.mean(estimated) == pytest.approx(np.mean(spread), rel=0.03)
    assert np.mean(k_est) == pytest.approx(np.mean(k_true), rel=0.02)


def parts_of(seed, sample, problems=20, k=2, seeds=5):
    return NoiseParts(seeds=seeds, problems=problems, k=k, mean=0.5, seed=seed, seed_problem=0.0, problem=0.0,
                      sample=sample, ms_seed=math.nan, ms_problem=math.nan, ms_residual=math.nan)


def se_at_most(target):
    """The rule of the hand-worked plans: the standard error sd / sqrt(n) at most ``target`` (float slack)."""
    return lambda sd, n: sd / math.sqrt(n) <= target * (1 + 1e-9)


def test_plan_more_seeds_and_a_larger_k_by_hand():
    # two cells (w = +-1), seed part 0.01, tau2 0.2 over 20 problems: k part 0.01 / k;
    # SE^2 = 2 (0.01 + 0.01 / k) / n <= 0.05^2  <=>  n >= 8 (1 + 1 / k); now 5 seeds x k 2 (train 10, sample 1):
    #   more seeds at k 2: n = 12, 7 new runs x 2 cells x (10 + 2) = 168
    #   larger k on 5 seeds: 8 (1 + 1 / k) > 8 > 5 for every k: out of range
    #   k 3: n 11, 6 x 2 x 13 + 5 x 2 x 1 = 166; k 4: n 10, 5 x 2 x 14 + 5 x 2 x 2 = 160 (the cheapest);
    #   k 5: n 10, 150 + 30 = 180; k 6: 160 + 40; k 8: n 9, 4 x 2 x 18 + 5 x 2 x 6 = 204
    arms = [(1.0, parts_of(0.01, 0.2)), (-1.0, parts_of(0.01, 0.2))]
    assert contrast_spread(arms, 2) == pytest.approx(math.sqrt(0.02 * 1.5))
    out = plan(arms, se_at_most(0.05), seeds_now=5, k_now=2, train_cost=10.0, sample_cost=1.0, max_k=64)
    assert (out["seeds_only"]["seeds"], out["seeds_only"]["cost"]) == (12, 168.0)
    assert out["k_only"] is None
    assert (out["cheapest"]["seeds"], out["cheapest"]["k"], out["cheapest"]["cost"]) == (10, 4, 160.0)
    assert out["cheaper"] == "more seeds and a larger k"


def test_plan_a_larger_k_alone_by_hand():
    # seed part 0.001, k part 0.01 / k, 10 seeds now at k 2: SE^2 = 2 (0.001 + 0.01 / k) / 10 = 0.0012 > 0.02^2
    #   larger k: 0.001 + 0.01 / k <= 0.002 at k = 10: rescoring 10 runs x 2 cells x 8 more samples = 160
    #   more seeds at k 2: n = 2 x 0.006 / 0.0004 = 30, 20 new runs x 2 x (10 + 2) = 480
    arms = [(1.0, parts_of(0.001, 0.2, seeds=10)), (-1.0, parts_of(0.001, 0.2, seeds=10))]
    out = plan(arms, se_at_most(0.02), seeds_now=10, k_now=2, train_cost=10.0, sample_cost=1.0, max_k=64)
    assert (out["k_only"]["k"], out["k_only"]["cost"]) == (10, 160.0)
    assert (out["seeds_only"]["seeds"], out["seeds_only"]["cost"]) == (30, 480.0)
    assert out["cheapest"] == out["k_only"] and out["cheaper"] == "larger k"
    assert plan(arms, se_at_most(0.05), seeds_now=10, k_now=2, train_cost=10.0, sample_cost=1.0)["cheaper"] == "reached"


def test_the_default_rule_is_the_claims_seeds_needed():
    """At the current k, the plan's seeds are analysis.statistics.contrasts.seeds_needed's for the spread the
    components predict (the paired t test's power, statsmodels)."""
    arms = [(1.0, parts_of(0.004, 0.2)), (-1.0, parts_of(0.006, 0.2))]
    out = plan(arms, t_test_detects(0.1), seeds_now=2, k_now=4, train_cost=10.0, sample_cost=1.0, max_k=8)
    spread = math.sqrt(0.004 + 0.006 + 2 * 0.2 / (4 * 20))
    assert out["seeds_only"]["seeds"] == seeds_needed(0.1, spread) > 2
    at_level = plan(arms, t_test_detects(0.1, 0.025), seeds_now=2, k_now=4, train_cost=10.0, sample_cost=1.0, max_k=8)
    assert at_level["seeds_only"]["seeds"] == seeds_needed(0.1, spread, alpha=0.025) > out["seeds_only"]["seeds"]
    equivalent = plan(arms, tost_shows_equivalence(0.1), seeds_now=2, k_now=4, train_cost=10.0, sample_cost=1.0,
                      max_k=8)
    assert equivalent["seeds_only"]["seeds"] == seeds_needed_equivalence(0.1, spread) > 2


def test_expected_maximum_of_normals():
    # closed forms: E max of 1 = 0, of 2 = 1 / sqrt(pi), of 3 = 3 / (2 sqrt(pi))
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-12)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-9)
    rng = np.random.default_rng(0)
    assert expected_max_normal(10) == pytest.approx(rng.standard_normal((200_000, 10)).max(1).mean(), abs=0.01)


def test_selection_inflation_against_a_simulated_flat_run():
    """A run that never improves: 6 checkpoints, each scored on the same 30 problems with 8 fresh
    samples; the best checkpoint's score minus the true score, averaged, against the code's estimate."""
    rng = np.random.default_rng(5)
    p = rng.uniform(0.2, 0.8, 30)
    best = rng.binomial(8, p, size=(20_000, 6, 30)).mean(2).max(1) / 8 - p.mean()
    parts = parts_of(0.0, float((p * (1 - p)).mean()), problems=30, k=8)
    assert selection_inflation(parts, 6) == pytest.approx(best.mean(), rel=0.03)


def _counted_grid(tmp_path) -> tuple[Config, dict]:
    """The fabricated grid with per-problem counts at every checkpoint but one run's: its config and the
    fixed-step count tables per cell."""
    config = Config.build(validate({**make_grid(tmp_path), "claims": [
        {"name": "cost", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
         "smallest_effect": 0.1, "metric": "fixed"}]}))
    rng = np.random.default_rng(1)
    tables = {}
    for run in collect(config, progress=False):
        folder = config.folder.run(run.recipe, run.lag, run.seed)
        rows = folder.read_eval("tiny_test")
        for row in rows:
            row["per_problem"] = rng.binomial(8, rng.uniform(0.2, 0.8, 12)).tolist()
            row["n_problems"] = 12
            if (run.recipe, run.lag, run.seed) == ("grpo_r3", 8, 1):  # its cell keeps one run's counts: no split
                del row["per_problem"]
        folder.write_eval("tiny_test", rows)
        fixed = next((r for r in rows if r["step"] == run.summary.fixed_step and "per_problem" in r), None)
        tables.setdefault((run.recipe, run.lag), [])
        if fixed is not None:
            tables[run.recipe, run.lag].append(fixed["per_problem"])
    return config, tables


def _job_times(config: Config, train: float, evaluate: float) -> None:
    bench = config.folder.benchmarks_dir
    for rule, seconds in (("train", train), ("evaluate", evaluate)):
        (bench / rule).mkdir(parents=True, exist_ok=True)
        (bench / rule / "one.tsv").write_text(f"s\tcpu_time\tmax_rss\n{seconds}\t1\t1\n")


def test_the_noise_section_on_a_fabricated_grid(tmp_path):
    config, tables = _counted_grid(tmp_path)
    _job_times(config, 40.0, 4.0)
    out = noise.summarize_noise(config, collect(config, progress=False))
    json.dumps(out)  # summary.json is JSON
    short = [cell for cell in out["cells"] if len(tables[cell["recipe"], cell["lag"]]) < 2]
    assert [(c["recipe"], c["lag"], c["runs_left_out"]) for c in short] == [("grpo_r3", 8, 2)]
    assert short[0]["why"] == "1 run(s) with counts, k = 8: needs 2 seeds, 2 problems, k >= 2"
    for cell in (cell for cell in out["cells"] if cell not in short):
        table = tables[cell["recipe"], cell["lag"]]
        assert cell["parts"] == decompose(table, 8).as_dict()
        assert cell["runs_left_out"] == 3 - len(table)
    (claim,) = out["plans"]
    assert claim["smallest_effect"] == 0.1 and claim["seeds_now"] == 2 and claim["alpha"] == 0.05  # one claim
    assert (claim["train_cost"], claim["sample_cost"]) == (40.0, 0.5)
    assert claim["cheaper"] in {"reached", "more seeds", "larger k", "more seeds and a larger k", "out of range"}
    (cells, plans) = noise_sections(Summary(noise=out))
    assert cells.title.startswith("noise: seed vs evaluation") and len(cells.blocks[0].rows) == len(out["cells"])
    assert plans.blocks[0].rows[0][0] == "cost" and plans.blocks[0].rows[0][-1] == claim["cheaper"]


def test_two_runs_of_one_grid_write_the_same_summary_json_and_their_times_apart(tmp_path):
    """The seeds-vs-k plans are priced by the jobs' wall times, which differ between two runs of one grid:
    they go to job_times.json, and summary.json stays the same bytes (issue 63)."""
    from analysis.report.write import write_reports

    config, _ = _counted_grid(tmp_path)
    written = []
    for train, evaluate in ((40.0, 4.0), (90.0, 2.0)):
        _job_times(config, train, evaluate)
        write_reports(config, progress=False)
        written.append((config.folder.summary_path.read_bytes(), json.loads(config.folder.job_times_path.read_text())))
    (first, first_times), (second, second_times) = written
    assert first == second and b"train_cost" not in first
    assert [t["noise_plans"][0]["train_cost"] for t in (first_times, second_times)] == [40.0, 90.0]
    assert second_times["job_costs"][0]["wall_s"] == 90.0


def test_too_small_a_table_is_refused_naming_the_design():
    with pytest.raises(ValueError, match="needs >= 2 seeds, >= 2 problems and k >= 2"):
        decompose([[1, 2, 3]], k=4)
    with pytest.raises(ValueError, match="k = 1"):
        decompose([[1, 0], [0, 1]], k=1)


@pytest.mark.parametrize("seeds", [3, 10])
def test_the_interval_over_seeds_and_problems_covers(seeds):
    """Coverage of the Satterthwaite interval of the cell mean over seeds and problems, on tables
    drawn from the model (30 problems, k = 4; true mean 0.5): 1,000 trials, within binomial error of 95%
    (measured 2026-12-01 on the 2-core dev box: 0.938-0.982 at 2, 3, 5 and 10 seeds, three mixes of the parts)."""
    rng = np.random.default_rng(seeds)
    hits = 0
    for _ in range(1000):
        counts, _ = simulated_table(rng, seeds=seeds, problems=30, k=4)
        out = interval(decompose(counts, k=4))
        hits += out["low"] <= 0.5 <= out["high"]
    assert 0.93 <= hits / 1000 <= 0.975

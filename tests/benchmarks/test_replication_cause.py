"""The decomposition of the replication probability's miss (benchmarks/bench_replication_cause.py): its
"printed" variant is table.md's value to the last digit, and each other variant takes away exactly the
uncertainty it names."""
import math

import numpy as np
import pytest

from analysis.statistics.predictive import DRAWS, SEED, chances_at, contrast_agreement
from benchmarks.bench_replication_cause import VARIANTS, draws

LOOKS, LEVELS = (5, 8, 12), (0.005, 0.005, 0.005)
RUN = (0.21, 0.05, 5)  # a first run: mean 21 points, sd 5, stopped at 5 seeds
TRUTH, PRIOR = (0.20, 0.045), (math.log(0.04), 0.4)


def _draws(variant: str):
    return draws(variant, *RUN, TRUTH, PRIOR, np.random.default_rng(SEED))


def test_the_printed_variant_is_what_table_md_prints():
    m, s, n = RUN
    rng = np.random.default_rng(SEED)
    mu, sigma = draws("printed", *RUN, TRUTH, PRIOR, rng)  # rng is left where contrast_agreement draws its reruns
    each = chances_at(mu, sigma, LOOKS, LEVELS, 0.10, "greater", "exceeds", rng)
    assert float(np.mean(each)) == contrast_agreement(m, s, s / math.sqrt(n), n - 1, LOOKS, LEVELS, 0.10, "greater",
                                                      "exceeds")[0]


def test_each_variant_holds_fixed_what_it_names_and_draws_the_rest():
    found = {variant: _draws(variant) for variant in VARIANTS}
    assert all(len(mu) == len(sigma) == DRAWS for mu, sigma in found.values())
    assert np.all(found["spread known"][1] == TRUTH[1]) and np.std(found["spread known"][0]) > 0.01
    assert np.all(found["effect known"][0] == TRUTH[0]) and np.std(found["effect known"][1]) > 0.005
    assert np.all(found["both known"][0] == TRUTH[0]) and np.all(found["both known"][1] == TRUTH[1])
    # the spread's posterior at 4 df under a log-normal prior about 4 points: its upper tail cut against the flat one's
    flat, prior = found["printed"][1], found["spread prior"][1]
    assert np.quantile(prior, 0.95) < 0.8 * np.quantile(flat, 0.95)
    assert np.median(prior) == pytest.approx(np.exp(np.mean(np.log(prior))), rel=0.1)

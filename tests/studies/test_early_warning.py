"""The ESS early-warning rule (studies.early_warning): drop step, lead time, false alarms."""
from studies.early_warning import ess_drop_step, table


def rows(ess_by_step):
    return [{"step": step, "offpolicy/ess": value} for step, value in ess_by_step.items()]


def test_the_drop_is_the_first_trailing_mean_below_half_the_baseline_median():
    ess = {step: 0.8 for step in range(1, 101)}
    ess.update({step: 0.2 for step in range(61, 101)})  # from step 61 on
    # trailing 10-step means: step 66 -> (4 x 0.8 + 6 x 0.2) / 10 = 0.44 > 0.4; step 67 -> 0.38 < 0.4
    assert ess_drop_step(rows(ess)) == 67


def test_the_ramp_before_the_baseline_window_and_a_flat_run_raise_no_alarm():
    ess = {step: (0.1 if step <= 10 else 0.7) for step in range(1, 201)}  # the first batches' ramp
    assert ess_drop_step(rows(ess)) is None
    assert ess_drop_step(rows({step: 0.5 for step in range(1, 25)})) is None  # too short to drop
    assert ess_drop_step([]) is None


def test_the_table_counts_warnings_leads_and_false_alarms():
    leads = [
        {"recipe": "grpo", "lag": 8, "seed": 0, "collapsed": True, "collapse_step": 120, "drop_step": 80, "lead": 40},
        {"recipe": "grpo", "lag": 8, "seed": 1, "collapsed": True, "collapse_step": 60, "drop_step": 90, "lead": -30},
        {"recipe": "grpo", "lag": 8, "seed": 2, "collapsed": True, "collapse_step": 60, "drop_step": None, "lead": None},
        {"recipe": "grpo", "lag": 8, "seed": 3, "collapsed": False, "collapse_step": None, "drop_step": 50, "lead": None},
        {"recipe": "grpo", "lag": 8, "seed": 4, "collapsed": False, "collapse_step": None, "drop_step": None, "lead": None},
    ]
    assert "| grpo | 8 | 3/5 | 1/3 | 40, -30 | 1/2 |" in table(leads)

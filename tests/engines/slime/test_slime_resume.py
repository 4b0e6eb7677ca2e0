"""Time-limit stops and resumes lose no prompt, in every lag mode: engines.slime.driver.lag_loop over
slime's own data source at the pin (tests/support/slime_resume.py), stopped at the warning or killed
before its stop save, then resumed as slime resumes: the prompts of the trained rollouts, in order,
equal an uninterrupted run's."""
from __future__ import annotations

import json

import pytest

from harness.lag import LAG_MODES
from tests.support.slime_resume import prompt_sequences

SLIME_MODES = tuple(mode for mode in LAG_MODES if mode != "queue")  # queue: the tiny engine's only

PROMPTS, BATCH, STEPS = 30, 4, 20  # 20 rollouts x 4 prompts: the run crosses two epochs (reshuffled)


@pytest.fixture(scope="module")
def resumed_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"problem {i}", "label": str(i)}) + "\n" for i in range(PROMPTS)))
    cases = [(mode, lag, killed) for mode in SLIME_MODES for lag in (1, 3, 8) for killed in (False, True)]
    specs = [{"prompts": str(prompts), "batch_size": BATCH, "steps": STEPS, "mode": mode, "lag": lag, "seed": 1,
              "save_interval": 5, "stop_after": 12, "killed": killed, "dir": str(tmp / f"{mode}-{lag}-{killed}")}
             for mode, lag, killed in cases]
    return dict(zip(cases, prompt_sequences(specs)))


@pytest.mark.parametrize("killed", [False, True], ids=["stopped at the warning", "killed before the stop save"])
@pytest.mark.parametrize("lag", [1, 3, 8])
@pytest.mark.parametrize("mode", SLIME_MODES)
def test_a_resumed_run_trains_the_prompts_of_an_uninterrupted_run(resumed_runs, mode, lag, killed):
    result = resumed_runs[(mode, lag, killed)]
    assert result["stopped_at"] == 11  # the warning came after 12 trained rollouts
    assert result["resumed_from"] == (10 if killed else 12)  # the last periodic save (step 10) or the stop's
    uninterrupted = result["uninterrupted"]
    assert len(uninterrupted) == STEPS and all(len(batch) == BATCH for batch in uninterrupted)
    assert result["resumed"] == uninterrupted
    seen = [prompt for batch in uninterrupted for prompt in batch]
    assert len(set(seen[:PROMPTS])) == PROMPTS  # an epoch holds every prompt once: none skipped, none repeated

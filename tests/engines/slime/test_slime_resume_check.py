"""The GPU resume check's measurements and verdicts on a CPU (engines.slime.resume_check): Adam's step and moment
norms read from a real torch optimizer's state dict, saved then loaded (and a load that loses the step, as the
upstream reports describe), the driver's optimizer log through fake Ray actors, and the noise-floor comparison of
a resumed run with an uninterrupted one."""
from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch

from engines.slime.resume_check import (
    adam_problems,
    adam_state,
    noise_floor,
    optimizer_states,
    record_optimizer,
    resume_problems,
)


def trained_adam(steps: int) -> tuple[torch.nn.Module, torch.optim.Adam]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(16, 4)).pow(2).mean().backward()
        optimizer.step()
    return model, optimizer


def loaded(state_dict: dict) -> torch.optim.Adam:
    _, fresh = trained_adam(0)
    fresh.load_state_dict(copy.deepcopy(state_dict))  # a load from disk: tensors of its own
    return fresh


def test_adams_step_and_moment_norms_survive_a_save_and_load():
    _, optimizer = trained_adam(3)
    saved = adam_state(optimizer.state_dict())
    assert saved["step"] == 3 and saved["params"] == 4 and saved["exp_avg_norm"] > 0 < saved["exp_avg_sq_norm"]
    assert adam_state(loaded(optimizer.state_dict()).state_dict()) == saved
    assert adam_state(trained_adam(0)[1].state_dict())["step"] == 0  # no step taken: no state


def actor_of(optimizer) -> SimpleNamespace:
    """A slime trainer actor as optimizer_states sees it: a Megatron optimizer wrapping a torch one."""
    return SimpleNamespace(optimizer=SimpleNamespace(optimizer=optimizer))


class Handle:
    """A Ray actor handle whose ``__ray_call__.remote(f)`` runs ``f(actor)`` at once."""

    def __init__(self, actor):
        self.__ray_call__ = SimpleNamespace(remote=lambda function: function(actor))


def log_of(folder, saved_optimizer, loaded_optimizer):
    folder.mkdir(exist_ok=True)
    log = folder / "optimizer.jsonl"
    for when, optimizer in (("loaded", saved_optimizer), ("saved", saved_optimizer), ("loaded", loaded_optimizer)):
        rollout_id = -1 if when == "loaded" and optimizer is saved_optimizer else 2
        record_optimizer(str(log), when, rollout_id, SimpleNamespace(_actor_handlers=[Handle(actor_of(optimizer))] * 2),
                         get=list)
    return log


def test_the_driver_log_compares_the_state_saved_with_the_state_loaded(tmp_path):
    _, optimizer = trained_adam(3)
    log = log_of(tmp_path, optimizer, loaded(optimizer.state_dict()))
    assert [json.loads(line)["when"] for line in log.read_text().splitlines()] == ["loaded", "saved", "loaded"]
    assert adam_problems(log) == []


def test_a_load_that_loses_adams_step_or_moments_is_named(tmp_path):
    """Megatron-LM #1842's kind: the step count reset at the load; a moment zeroed is caught the same way."""
    _, optimizer = trained_adam(3)
    reset = copy.deepcopy(optimizer.state_dict())  # its per-parameter dicts are the optimizer's own
    for state in reset["state"].values():
        state["step"] = torch.tensor(0.0)
    found = adam_problems(log_of(tmp_path / "a", optimizer, loaded(reset)))
    assert found[:2] == ["rank 0 optimizer 0: Adam's step 0.0 after the load, 3.0 saved at rollout 2",
                         "rank 1 optimizer 0: Adam's step 0.0 after the load, 3.0 saved at rollout 2"]
    zeroed = loaded(optimizer.state_dict())
    next(iter(zeroed.state.values()))["exp_avg"].zero_()
    found = adam_problems(log_of(tmp_path / "b", optimizer, zeroed))
    assert len(found) == 2 and all("exp_avg_norm" in line and "saved at rollout 2" in line for line in found)
    chained = SimpleNamespace(optimizer=SimpleNamespace(chained_optimizers=[SimpleNamespace(optimizer=optimizer)] * 2))
    assert [state["step"] for state in optimizer_states(chained)] == [3.0, 3.0]  # one state per chained optimizer


def rows(values: list[tuple[float, float]]) -> dict[int, dict]:
    return {step: {"loss": loss, "grad_norm": norm} for step, (loss, norm) in enumerate(values, start=1)}


def test_a_resume_within_the_noise_floor_passes_and_one_beyond_it_is_named():
    whole = rows([(0.50, 1.0), (0.40, 1.1), (0.30, 1.2), (0.20, 1.3)])
    again = rows([(0.50, 1.0), (0.40, 1.1), (0.30 * (1 + 2e-4), 1.2), (0.20, 1.3 * (1 - 1e-4))])
    floor = noise_floor(whole, again)
    assert floor == pytest.approx({"loss": 2e-4 / (1 + 2e-4), "grad_norm": 1e-4})
    within = rows([(0.50, 1.0), (0.40, 1.1), (0.30 * (1 - 3e-4), 1.2), (0.20, 1.3)])
    assert resume_problems(whole, within, floor, after=2) == []
    beyond = rows([(0.50, 1.0), (0.40, 1.1), (0.30, 1.2), (0.20 * 1.01, 1.3)])
    (found,) = resume_problems(whole, beyond, floor, after=2)
    assert found.startswith("step 4 loss: 0.202 resumed, 0.2 uninterrupted (relative 9.90e-03 >")
    assert resume_problems(whole, rows([(0.5, 1.0)]), floor, after=0) == [
        "the resumed run logged steps [1], the uninterrupted one [1, 2, 3, 4]"]
    # a floor of exact zeros (bitwise-equal runs) still allows floor_min, not nothing
    assert resume_problems(whole, rows([(0.50, 1.0), (0.40, 1.1), (0.30 * (1 + 1e-7), 1.2), (0.20, 1.3)]),
                           noise_floor(whole, whole), after=2) == []

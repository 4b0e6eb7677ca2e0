"""engines/tiny/adam.py: torch.optim.Adam's updates bit for bit, its state layout, and no torch._dynamo."""
import subprocess
import sys

import torch

from engines.tiny.adam import Adam


def _params(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(4, 8, 16), (4, 16), (13, 64), (64,), ()]
    return [torch.randn(shape, generator=generator).requires_grad_() for shape in shapes]


def _steps(optimizer, params, steps: int, seed: int, lrs=None) -> None:
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for index, p in enumerate(params):
            if (step + index) % 4 != 3:  # some parameters get no gradient on some steps
                p.grad = torch.randn(p.shape, generator=generator) * 10 ** (index - 2)
        if lrs is not None:
            optimizer.param_groups[0]["lr"] = lrs[step]
        optimizer.step()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(-1).view(torch.int32), b.view(-1).view(torch.int32))


def test_updates_and_state_are_torch_optims_bit_for_bit():
    ours, theirs = _params(0), _params(0)
    lrs = [7e-4 * (0.5 + (s % 3) / 2) for s in range(12)]  # VCPO-style lr changes between steps
    mine = Adam(ours, lr=7e-4, betas=(0.9, 0.999))
    torch_adam = torch.optim.Adam(theirs, lr=7e-4, betas=(0.9, 0.999))
    _steps(mine, ours, 12, seed=1, lrs=lrs)
    _steps(torch_adam, theirs, 12, seed=1, lrs=lrs)
    assert all(_same_bits(a.detach(), b.detach()) for a, b in zip(ours, theirs))
    state, reference = mine.state_dict(), torch_adam.state_dict()
    assert list(state["state"]) == list(reference["state"])
    for index, tensors in reference["state"].items():
        assert list(state["state"][index]) == list(tensors)
        assert all(_same_bits(state["state"][index][k], v) for k, v in tensors.items())
    assert state["param_groups"][0]["params"] == reference["param_groups"][0]["params"]


def test_a_state_saved_by_torch_optim_resumes_identically():
    ours, theirs = _params(3), _params(3)
    torch_adam = torch.optim.Adam(theirs, lr=3e-4)
    _steps(torch_adam, theirs, 5, seed=4)
    with torch.no_grad():
        for a, b in zip(ours, theirs):
            a.copy_(b)
    mine = Adam(ours, lr=3e-4)
    saved = {index: {k: v.clone() for k, v in tensors.items()} for index, tensors in torch_adam.state_dict()["state"].items()}
    restored = mine.state_dict()  # as the trainer's restore does: its own layout, the saved tensors put in
    restored["state"] = saved
    mine.load_state_dict(restored)
    _steps(torch_adam, theirs, 5, seed=5)
    _steps(mine, ours, 5, seed=5)
    assert all(_same_bits(a.detach(), b.detach()) for a, b in zip(ours, theirs))


def test_a_state_of_other_parameters_is_refused():
    mine = Adam(_params(0), lr=1e-3)
    other = Adam(_params(0)[:2], lr=1e-3).state_dict()
    try:
        mine.load_state_dict(other)
    except ValueError as error:
        assert "groups of [2] parameters" in str(error)
    else:
        raise AssertionError("a state of 2 parameters loaded into an optimizer of 5")


def test_steps_import_no_dynamo():
    code = ("import sys, torch\nfrom engines.tiny.adam import Adam\np = torch.nn.Linear(3, 2)\n"
            "opt = Adam(p.parameters(), lr=1e-3)\nfor _ in range(2):\n    opt.zero_grad()\n"
            "    p(torch.ones(1, 3)).sum().backward()\n    opt.step()\nopt.load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"

"""The tiny trainer's Adam: torch.optim.Adam's CPU arithmetic without torch.optim's compiler hooks.

torch.optim.Optimizer wraps add_param_group, zero_grad, state_dict and load_state_dict in
torch._disable_dynamo, and every step() in torch._dynamo.graph_break(); each imports torch._dynamo
on its first call, whatever the foreach / fused / capturable settings: 2-5 s of every train job's
CPU time here (issue 35), for a compiler this engine never runs.

This class makes the updates torch.optim.Adam makes for CPU tensors with its defaults (no weight
decay, amsgrad, maximize, capturable or differentiable; foreach and fused unset, which on CPU means
torch 2.13's _single_tensor_adam, torch/optim/adam.py), with the same tensor ops in the same order,
so every step is bit-identical; tests/engines/tiny/test_tiny_adam.py holds it to torch.optim.Adam. Its state
keeps torch.optim's state_dict layout ({"state": {index: {"step", "exp_avg", "exp_avg_sq"}},
"param_groups": [{..., "params": [index, ...]}]}), so the trainer's resume state is unchanged.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch


class Adam:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        # one group, as the trainer uses it; the trainer sets param_groups[0]["lr"] per step (VCPO)
        self.param_groups = [{"params": list(params), "lr": lr, "betas": tuple(betas), "eps": eps}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self._params():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """torch's per-parameter ops, each issued for all parameters by one torch._foreach_* call: on the
        CPU a foreach op is a loop over the same per-tensor op (torch's *_slow kernels), so the same
        bits, with one Python call per op instead of one per op and parameter."""
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            params = [p for p in group["params"] if p.grad is not None]  # as torch.optim: no gradient, no step
            if not params:
                continue
            for p in params:
                if p not in self.state:  # torch.optim's lazy state: a float32 step count on the CPU, zero moments
                    self.state[p] = {"step": torch.tensor(0.0),
                                     "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                     "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            states = [self.state[p] for p in params]
            steps, grads = [s["step"] for s in states], [p.grad for p in params]
            exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
            torch._foreach_add_(steps, 1)
            torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
            # the bias corrections in Python floats, in torch's order: the same rounding; one read of all
            # step counts (they differ only where a parameter once had no gradient)
            counts = torch.stack(steps).tolist()
            for step in dict.fromkeys(counts):
                members = [i for i, count in enumerate(counts) if count == step]
                step_size = lr / (1 - beta1 ** step)
                denom = torch._foreach_div(torch._foreach_sqrt([exp_avg_sqs[i] for i in members]),
                                           (1 - beta2 ** step) ** 0.5)
                torch._foreach_add_(denom, eps)
                torch._foreach_addcdiv_([params[i] for i in members], [exp_avgs[i] for i in members], denom,
                                        value=-step_size)

    def state_dict(self) -> dict:
        """torch.optim's layout; the state tensors themselves (not copies), as torch.optim returns them."""
        index = {id(p): i for i, p in enumerate(self._params())}
        groups, start = [], 0
        for group in self.param_groups:
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(start, start + len(group["params"])))})
            start += len(group["params"])
        return {"state": {index[id(p)]: state for p, state in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """State in torch.optim's layout (from state_dict() or torch.optim.Adam's): moments cast to their
        parameter's dtype, the step count kept as given, the groups' settings restored."""
        params = self._params()
        saved = state_dict["param_groups"]
        if [len(g["params"]) for g in saved] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"optimizer state has groups of {[len(g['params']) for g in saved]} parameters, "
                             f"this optimizer {[len(g['params']) for g in self.param_groups]}")
        self.state = {}
        for index, state in state_dict["state"].items():
            p = params[int(index)]
            self.state[p] = {k: v if k == "step" else v.to(dtype=p.dtype, device=p.device) for k, v in state.items()}
        for group, saved_group in zip(self.param_groups, saved):
            group.update({k: v for k, v in saved_group.items() if k in ("lr", "betas", "eps")})

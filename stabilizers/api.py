"""The stabilizer contract: PolicyBatch in, LossOutput out, looked up by name.

A stabilizer is a pure torch function over [B, L] tensors (responses x response tokens),
registered with ``@register("name")`` and called as ``get("name")(batch, **params)``.
Every module of this package is imported on first lookup, so adding a stabilizer is one
new file here; nothing else changes. Modules whose name starts with an underscore are support
code (the shared surrogate, the catalog, diagnostics...): the others are the stabilizers.

The contract, checked by register() when the module is imported:
- the signature is ``(batch, *, param=default, ...)``: every parameter after the batch is
  keyword-only and has a default, the source's (cite it in the docstring), written as a literal
  (the workflow reads it from the source);
- every keyword parameter has a declared value range, ``@ranges(...)`` under ``@register``
  (stabilizers._ranges), and its default is inside it; ``aggregation``, ``ratio_against``,
  ``quantile_scope`` and ``seed`` have one meaning and range in every loss (CONVENTIONS);
- ``aggregation`` is a parameter of every loss: "token_mean" (every active token weighs the same),
  "sample_mean" (each response's token mean, then the mean over responses: one weight per
  response) or "token_sum_norm" (Dr.GRPO's sum over a constant; stabilizers._surrogate.aggregate).
  Its default follows the method's source; the slime adapter maps the first two to slime's
  reducers (per-token loss, sample mean) and refuses the third by name;
- a loss that reads the sampler's distribution beyond the sampled token requests it when it
  registers, ``@register("name", needs=("sampler_logp",))`` (the names: SAMPLER_NEEDS); the engine
  fills ``PolicyBatch.sampler`` with what its recipe's loss needs, and a config whose engine cannot
  give it is refused before any job (harness.engine.check_supplies);
- a loss that draws random numbers takes ``seed: int`` and draws as a function of (seed, token
  position) alone: no global RNG, no generator state. Recipe.compute_loss passes each training
  step's seed, so a step's draws are the same on a rerun and differ from step to step.

This module does not import torch: names, parameters and value ranges come from the modules'
source (stabilizers._catalog), so a workflow plans and checks a grid without paying torch's
import. The call path is free of host syncs (validate_batch is for engines to call once per
step, at their boundary, not inside the loss).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Protocol

from . import _catalog as catalog
from ._ranges import CONVENTIONS, Range, check_range, check_values, complete, keyword_defaults, ranges

__all__ = ["SAMPLER_NEEDS", "LossOutput", "PolicyBatch", "Reduce", "SamplerDistribution", "available", "check_params",
           "check_range", "get", "loss_needs", "parameters", "ranges", "register", "validate_batch", "value_ranges"]

if TYPE_CHECKING:
    import torch

_BATCH_TENSORS = ("logp", "old_logp", "rollout_logp", "advantages", "mask")
_PADDED = ("old_logp", "rollout_logp", "advantages", "token_weight")  # non-finite padding replaced by 0

# What a loss may read of the sampler beyond the sampled token, by the name it requests at registration
# and an engine declares it supplies (harness.engine.Engine.supplies). A top-k head (SGLang's
# top_logprobs_num) would be a third name; no engine transports one yet.
SAMPLER_NEEDS = {
    "sampler_logp": "the sampler's log-probs over the whole vocabulary at each response token, with the "
                    "current policy's on the same entries (PolicyBatch.sampler.logq and .logp)",
    "sampler_entropy": "the sampler's entropy H(mu) at each response token (PolicyBatch.sampler.entropy)",
}


class Reduce(Protocol):
    """Collectives across data-parallel ranks. ``None`` in a PolicyBatch means one process."""

    def all_gather(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's 1-D tensor (sizes may differ), in rank order; no gradient."""


@dataclass(frozen=True)
class SamplerDistribution:
    """The sampler's distribution at each response token, beyond the sampled one; an engine fills only
    what its recipe's loss needs (SAMPLER_NEEDS), the rest stays None.

    logq: [B, L, V] log mu(v) for every vocabulary entry v (detached): "sampler_logp".
    logp: [B, L, V] log pi(v) of the current policy on the same entries, with gradient (its entry at the
        sampled token is PolicyBatch.logp): "sampler_logp".
    entropy: [B, L] H(mu) = -sum_v mu(v) log mu(v): "sampler_entropy".
    """

    logq: torch.Tensor | None = None
    logp: torch.Tensor | None = None
    entropy: torch.Tensor | None = None


@dataclass(frozen=True)
class PolicyBatch:
    """One micro-batch of sampled responses, all tensors of shape [B, L].

    logp: current policy log-prob of each sampled token (carries the gradient).
    old_logp: the trainer's recompute at the start of the update (no gradient).
    rollout_logp: log mu, recorded by the inference engine when it sampled the token.
    advantages: per-token advantage (a response's tokens share it).
    mask: 1 for an active response token, 0 for padding.
    token_weight: optional per-token weight applied before aggregation (TIS sets it).
    reduce: collectives across data-parallel ranks, or None for one process.
    sampler: the sampler's distribution, for a loss that registered needs (SamplerDistribution); else None.
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    rollout_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    token_weight: torch.Tensor | None = None
    reduce: Reduce | None = None
    sampler: SamplerDistribution | None = None

    # mask as booleans, computed once per batch (every loss reads it several times); set in
    # __post_init__ rather than a cached_property, whose lock torch.compile cannot trace
    active: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        active = self.mask.bool()
        object.__setattr__(self, "active", active)
        # Recorded data may hold -inf or NaN at padding (an inference engine's or a user's fill). Such a value
        # is replaced by 0 here, before any loss exponentiates or subtracts it, so that every loss's value
        # and gradient stay finite (issue 62). A finite padding value is kept as it is: the gradient's bits,
        # the sign of its zeros at padding included, and so every recorded fingerprint, do not change. The
        # tensors that carry the gradient (logp, sampler.logp) are the caller's own leaves and stay as they
        # are: the trainer computes them, finite at every position (validate_batch refuses one that is not).
        # A tensor of another shape is left for validate_batch to name.
        for name in _PADDED:
            value = getattr(self, name)
            if value is not None and value.shape == active.shape:
                object.__setattr__(self, name, value.where(active | value.isfinite(), 0.0))
        if self.sampler is not None:
            fields = {}
            for name in ("logq", "entropy"):
                value = getattr(self.sampler, name)
                if value is not None and value.shape[:2] == active.shape:
                    keep = active[..., None] if value.dim() == 3 else active
                    fields[name] = value.where(keep | value.isfinite(), 0.0)
            object.__setattr__(self, "sampler", replace(self.sampler, **fields))

    def with_token_weight(self, weight: torch.Tensor) -> "PolicyBatch":
        return replace(self, token_weight=weight)


@dataclass
class LossOutput:
    """A scalar loss and namespaced diagnostics (``sat/q``, ``clip/frac_upper``...), detached 0-d tensors."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


Stabilizer = Callable[..., LossOutput]
_REGISTRY: dict[str, Stabilizer] = {}


def _where_defined(fn: Callable) -> str:
    fn = inspect.unwrap(fn)  # the loss under its @ranges check
    try:
        return f"{fn.__module__}.{fn.__qualname__} ({inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]})"
    except (OSError, TypeError):
        return f"{fn.__module__}.{fn.__qualname__}"


def _check_contract(name: str, fn: Stabilizer) -> None:
    """The contract above, for a function about to be registered as ``name``; a ValueError names it."""
    where = f"stabilizer {name!r} ({_where_defined(fn)})"
    parameters = list(inspect.signature(fn).parameters.values())
    if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"{where}: the first parameter must be the batch")
    loose = [p.name for p in parameters[1:] if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.default is p.empty]
    if loose:
        raise ValueError(f"{where}: {loose} must be keyword-only with a default (write `batch, *, name=default`)")
    if "aggregation" not in keyword_defaults(fn):
        raise ValueError(f"{where}: every loss takes `aggregation` ({' or '.join(CONVENTIONS['aggregation'])}), "
                         "the reducer the slime adapter maps")
    if not hasattr(fn, "__ranges__"):
        raise ValueError(f"{where}: declare its value ranges with @ranges(...) under @register")


def register(name: str, *, needs: tuple[str, ...] = ()) -> Callable[[Stabilizer], Stabilizer]:
    """Register a stabilizer under ``name``, checking the contract above; a second definition of the
    same name raises. ``needs``: what it reads of PolicyBatch.sampler (SAMPLER_NEEDS), written as a
    literal (the config check reads it from the source)."""
    unknown = sorted(set(needs) - set(SAMPLER_NEEDS))
    if unknown:
        raise ValueError(f"stabilizer {name!r} needs {unknown}; an engine can supply {sorted(SAMPLER_NEEDS)}")

    def decorator(fn: Stabilizer) -> Stabilizer:
        if name in _REGISTRY and _where_defined(_REGISTRY[name]) != _where_defined(fn):
            raise ValueError(
                f"stabilizer {name!r} is defined twice: {_where_defined(_REGISTRY[name])} "
                f"and {_where_defined(fn)}"
            )
        _check_contract(name, fn)
        fn.__needs__ = tuple(needs)
        _REGISTRY[name] = fn
        return fn

    return decorator


def _discover() -> None:
    """Import every module of this package so their @register calls run (already imported ones
    are cached; a file added since the last scan is found because the finder caches are dropped)."""
    importlib.invalidate_caches()
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{module.name}")


def available() -> list[str]:
    """The names of every stabilizer module in this package."""
    _discover()
    return sorted(_REGISTRY)


def parameters(name: str) -> dict[str, object]:
    """The stabilizer's keyword parameters with their (paper) defaults, read from its module's
    source without importing it (stabilizers._catalog), or from the signature of one registered at
    run time outside this package's files; KeyError naming the known ones if none is."""
    defaults = catalog.keyword_defaults(name)
    if defaults is None and name in _REGISTRY:
        defaults = keyword_defaults(_REGISTRY[name])
    if defaults is None:
        raise KeyError(f"unknown stabilizer {name!r}; available: {', '.join(sorted(catalog.signatures()))}")
    return dict(defaults)


def value_ranges(name: str) -> dict[str, Range]:
    """Every keyword parameter's value range (its ``@ranges``, else its convention), from source
    without torch like parameters()."""
    declared = catalog.declared_ranges(name)
    if declared is None and name in _REGISTRY:
        return dict(_REGISTRY[name].__ranges__)
    return complete(declared or {}, parameters(name), f"stabilizer {name!r}")


def check_params(name: str, params: dict) -> None:
    """The names and values of ``params`` for stabilizer ``name`` (no torch); a ValueError names the key."""
    accepted = parameters(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"stabilizer {name!r} has no parameter(s) {unknown}; it accepts {sorted(accepted)}")
    check_values(value_ranges(name), accepted, params)


def loss_needs(name: str) -> tuple[str, ...]:
    """What stabilizer ``name`` reads of PolicyBatch.sampler (its ``needs=``), from source without torch
    like parameters(), or from one registered at run time outside this package's files."""
    needs = catalog.needs(name)
    if needs is None and name in _REGISTRY:
        needs = _REGISTRY[name].__needs__
    if needs is None:
        raise KeyError(f"unknown stabilizer {name!r}; available: {', '.join(sorted(catalog.signatures()))}")
    return needs


_FIELD_NEED = {"logq": "sampler_logp", "logp": "sampler_logp", "entropy": "sampler_entropy"}


def sampler_field(batch: PolicyBatch, field_name: str, loss: str) -> torch.Tensor:
    """``batch.sampler.<field_name>``, or a ValueError naming the loss and what it needs (a Python
    check on None, not on a tensor value)."""
    value = None if batch.sampler is None else getattr(batch.sampler, field_name)
    if value is None:
        need = _FIELD_NEED[field_name]
        raise ValueError(f"stabilizer {loss!r} needs PolicyBatch.sampler.{field_name}: {SAMPLER_NEEDS[need]}; "
                         f"the engine must fill it (register(..., needs=({need!r},)))")
    return value


def _lookup(name: str) -> Stabilizer:
    if name not in _REGISTRY:
        _discover()  # a module may have been added since the last scan
    if name not in _REGISTRY:
        raise KeyError(f"unknown stabilizer {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def get(name: str) -> Stabilizer:
    """The stabilizer ``name``, wrapped to check its parameter names before running (a Python-only
    check: the wrapper traces with torch.compile like the loss). The batch is not validated here:
    engines call validate_batch once per step, at their boundary."""
    fn = _lookup(name)
    accepted = sorted(parameters(name))

    def checked(batch: PolicyBatch, **params) -> LossOutput:
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise ValueError(f"stabilizer {name!r} has no parameter(s) {unknown}; it accepts {accepted}")
        return fn(batch, **params)

    checked.__name__ = name
    checked.__doc__ = fn.__doc__
    return checked


def validate_batch(batch: PolicyBatch) -> None:
    """Shapes and finiteness of every tensor of ``batch``; a ValueError names the tensor and the first
    bad position. It reads values on the host (a sync on a GPU): engines call it once per step."""
    import torch

    shape = batch.logp.shape
    if batch.logp.dim() != 2:
        raise ValueError(f"PolicyBatch.logp must have shape [B, L], got {tuple(shape)}")
    tensors = {name: getattr(batch, name) for name in _BATCH_TENSORS}
    if batch.token_weight is not None:
        tensors["token_weight"] = batch.token_weight
    sampler = batch.sampler or SamplerDistribution()
    if sampler.entropy is not None:
        tensors["sampler.entropy"] = sampler.entropy
    for name in ("logq", "logp"):  # log-probs over the vocabulary: -inf (a zero probability) is allowed
        tensor = getattr(sampler, name)
        if tensor is not None and (tensor.dim() != 3 or tensor.shape[:2] != shape):
            raise ValueError(f"PolicyBatch.sampler.{name} has shape {tuple(tensor.shape)}, expected "
                             f"{tuple(shape)} + (vocabulary,)")
        if tensor is not None and torch.isnan(tensor.detach()).any():
            raise ValueError(f"PolicyBatch.sampler.{name} has NaN values, first at "
                             f"{tuple(torch.isnan(tensor.detach()).nonzero()[0].tolist())}")
    for name, tensor in tensors.items():
        if tensor.shape != shape:
            raise ValueError(
                f"PolicyBatch.{name} has shape {tuple(tensor.shape)}, expected {tuple(shape)} like logp"
            )
        # integers are finite; a finite sum proves every value finite (one cheap pass), an overflowing
        # sum is rechecked value by value
        if (tensor.is_floating_point() and not torch.isfinite(tensor.detach().sum())
                and not torch.isfinite(tensor).all()):
            bad = (~torch.isfinite(tensor)).nonzero()
            raise ValueError(
                f"PolicyBatch.{name} has {len(bad)} NaN/inf value(s), first at {tuple(bad[0].tolist())}"
            )

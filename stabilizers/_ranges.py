"""Value ranges of stabilizer parameters: declared beside the defaults, checked without torch.

A loss (or a weight such as TIS) declares each keyword parameter's values with ``@ranges``:

    @register("sat_grpo")
    @ranges(eps_low="[0, 1)", eps_high="[0, inf)", alpha="(0, 1]", enabled="bool")
    def sat_grpo(batch, *, eps_low=0.2, eps_high=0.2, alpha=0.9, enabled=True, aggregation="token_mean"): ...

A spec is an interval ``"[low, high)"`` (a bracket closes an end, a parenthesis opens it; a bound
is a number, ``inf``, ``-inf`` or the name of another parameter, e.g. ``beta="[alpha, inf]"``),
optionally followed by ``" or None"``; a tuple of the allowed values; or ``"bool"`` / ``"int"``.
The parameters every loss spells the same way (CONVENTIONS) need no declaration. The decorator
checks the values on every call (plain Python on the arguments: torch.compile traces it away), and
stabilizers._catalog reads the same literals from the source, so that a workflow refuses
``eps_low: 5`` while it plans, before torch is imported.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# the parameters every loss spells alike (stabilizers/api.py, "The contract")
CONVENTIONS: dict[str, object] = {
    "aggregation": ("token_mean", "sample_mean", "token_sum_norm"),
    "ratio_against": ("old", "rollout"),
    "quantile_scope": ("microbatch", "global"),
    "seed": "int",
}
_INTERVAL = re.compile(r"^([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+?)\s*([\])])(\s+or\s+None)?$")
_TYPES = {"bool": bool, "int": int}


@dataclass(frozen=True)
class Range:
    """One parameter's allowed values (see the module docstring for the spec it is parsed from)."""

    spec: object
    choices: tuple | None = None
    kind: type | None = None
    low: float | str = -math.inf
    high: float | str = math.inf
    low_open: bool = False
    high_open: bool = False
    allow_none: bool = False

    def check(self, name: str, value, values: Mapping[str, object]) -> None:
        """Raise a ValueError naming ``name`` when ``value`` is outside the range (``values``: every
        parameter's value, for bounds that name another parameter; one that is None leaves that end open)."""
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"{name} = {value!r}; expected one of {list(self.choices)}")
        elif self.kind is not None:
            if isinstance(value, bool) is not (self.kind is bool) or not isinstance(value, self.kind):
                raise ValueError(f"{name} = {value!r} is not {'true or false' if self.kind is bool else 'an integer'}")
        elif not (value is None and self.allow_none):
            low = values.get(self.low) if isinstance(self.low, str) else self.low
            high = values.get(self.high) if isinstance(self.high, str) else self.high
            check_range(name, value, -math.inf if low is None else low, math.inf if high is None else high,
                        low_open=self.low_open, high_open=self.high_open)


def check_range(name: str, value: float, low: float, high: float, *, low_open=False, high_open=False) -> None:
    """Raise a ValueError naming ``name`` when ``value`` is not a number in [low, high] (or open ends)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} = {value!r} is not a number")
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} = {value} is outside {lo}{low}, {high}{hi}")


def _bound(token: str) -> float | str:
    try:
        return float(token)
    except ValueError:
        if not token.isidentifier():
            raise ValueError(f"bound {token!r} is neither a number nor a parameter name") from None
        return token


@functools.cache
def parse(spec) -> Range:
    """The Range a spec declares; ValueError on a spec that is none of the forms above."""
    if isinstance(spec, tuple):
        return Range(spec, choices=spec)
    if spec in _TYPES:
        return Range(spec, kind=_TYPES[spec])
    match = _INTERVAL.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"range {spec!r} is not an interval like '[0, 1)', a tuple of values, 'bool' or 'int'")
    opening, low, high, closing, none = match.groups()
    return Range(spec, low=_bound(low), high=_bound(high), low_open=opening == "(", high_open=closing == ")",
                 allow_none=none is not None)


def complete(declared: Mapping[str, object], defaults: Mapping[str, object], where: str) -> dict[str, Range]:
    """Every keyword parameter's Range: its declaration, else its convention; a ValueError naming
    ``where`` for a parameter with neither, a declaration of no parameter, or a bound naming none."""
    unknown = sorted(set(declared) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: ranges declared for {unknown}, which are not its keyword parameters")
    missing = sorted(set(defaults) - set(declared) - set(CONVENTIONS))
    if missing:
        raise ValueError(f"{where}: no value range declared for {missing} (@ranges beside the defaults)")
    specs = {name: parse(declared.get(name, CONVENTIONS.get(name))) for name in defaults}
    for name, spec in specs.items():
        for bound in (spec.low, spec.high):
            if isinstance(bound, str) and bound not in defaults:
                raise ValueError(f"{where}: the range of {name} names {bound!r}, which is not a parameter")
    return specs


def check_values(specs: Mapping[str, Range], defaults: Mapping[str, object], params: Mapping[str, object],
                 prefix: str = "") -> None:
    """Check ``params`` (defaults filling the rest) against ``specs``; errors name ``prefix`` + the key."""
    values = {**defaults, **params}
    for name, spec in specs.items():
        spec.check(prefix + name, values[name], values)


def keyword_defaults(fn: Callable) -> dict[str, object]:
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def ranges(**declared) -> Callable[[Callable], Callable]:
    """Declare the value ranges of a function's keyword parameters and check them on every call."""

    def decorator(fn: Callable) -> Callable:
        defaults = keyword_defaults(fn)
        where = f"{fn.__module__}.{fn.__qualname__}"
        specs = complete(declared, defaults, where)
        try:
            check_values(specs, defaults, {})
        except ValueError as error:
            raise ValueError(f"{where}: a default is outside its range: {error}") from None

        @functools.wraps(fn)
        def checked(*args, **params):
            check_values(specs, defaults, {name: value for name, value in params.items() if name in specs})
            return fn(*args, **params)

        checked.__ranges__ = specs
        return checked

    return decorator

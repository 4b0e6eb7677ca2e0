"""Every stabilizer's name and keyword parameters, read from the source of this package's modules
without importing them (so without importing torch).

A stabilizer is a function decorated with ``@register("<name>")`` whose keyword-only parameters
carry its defaults; both are read with ``ast``. A default that is not a literal (a constant
defined elsewhere, ``math.inf``...) is read by importing that one module instead, so nothing is
lost, only the import is paid. Planning a 1,000-run grid (snakemake -n) checks recipe names and
parameter names this way in milliseconds; value ranges need the loss code (and torch) and are
checked when a recipe is run (stabilizers.recipes.check_values).
"""
from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).parent


class _NotLiteral(Exception):
    pass


def _registered_name(node: ast.FunctionDef) -> str | None:
    for decorator in node.decorator_list:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name) and decorator.func.id == "register"
                and len(decorator.args) == 1 and isinstance(decorator.args[0], ast.Constant)):
            return decorator.args[0].value
    return None


def _keyword_defaults(node: ast.FunctionDef) -> dict[str, object]:
    defaults = {}
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        try:
            defaults[arg.arg] = None if default is None else ast.literal_eval(default)
        except ValueError:
            raise _NotLiteral from None
    return defaults


@cache
def _module_signatures(path: Path, mtime_ns: int) -> dict[str, dict[str, object]]:
    """{name: {param: default}} of the stabilizers one module registers (cached per file version)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (name := _registered_name(node)) is not None:
            try:
                found[name] = _keyword_defaults(node)
            except _NotLiteral:
                fn = getattr(importlib.import_module(f"{__package__}.{path.stem}"), node.name)
                found[name] = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                               if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return found


def function_defaults(module: str, function: str) -> dict[str, object]:
    """The keyword defaults of a plain function of this package (e.g. the TIS weight), from source."""
    tree = ast.parse((_PACKAGE / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return _keyword_defaults(node)
    raise KeyError(f"stabilizers/{module}.py defines no function {function!r}")


_KNOWN: dict[str, dict[str, object]] = {}


def keyword_defaults(name: str) -> dict[str, object] | None:
    """The keyword defaults of stabilizer ``name``, None if no module registers it. Rescans the
    package only for a name not seen before, so a warm lookup is a dict read (which torch.compile
    traces through without a graph break)."""
    if name not in _KNOWN:
        _KNOWN.update(signatures())
    return _KNOWN.get(name)


def signatures() -> dict[str, dict[str, object]]:
    """{stabilizer name: {keyword parameter: default}} over every module of the package (a module
    added since the last call is found: the directory is listed on each call)."""
    found: dict[str, dict[str, object]] = {}
    for path in sorted(_PACKAGE.glob("*.py")):
        if not path.name.startswith("__"):
            found.update(_module_signatures(path, path.stat().st_mtime_ns))
    return found

"""Every stabilizer's name and keyword parameters, read from the source of this package's modules
without importing them (so without importing torch).

A stabilizer is a function decorated with ``@register("<name>")`` whose keyword-only parameters
carry its defaults; both are read with ``ast``. A default that is not a literal (a constant
defined elsewhere, ``math.inf``...) is read by importing that one module instead, so nothing is
lost, only the import is paid. The value ranges declared beside them (``@ranges(...)``,
stabilizers._ranges) are read the same way. Planning a 1,000-run grid (snakemake -n) checks recipe
names, parameter names and values this way in milliseconds.
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


def _decorator_call(node: ast.FunctionDef, name: str) -> ast.Call | None:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name) and decorator.func.id == name:
            return decorator
    return None


def _registered_name(node: ast.FunctionDef) -> str | None:
    call = _decorator_call(node, "register")
    if call is not None and len(call.args) == 1 and isinstance(call.args[0], ast.Constant):
        return call.args[0].value
    return None


def _registered_needs(node: ast.FunctionDef, path: Path) -> tuple[str, ...]:
    """The literal ``needs=`` of the function's ``@register(...)`` (what it reads of the sampler), () without one."""
    call = _decorator_call(node, "register")
    try:
        return tuple(next((ast.literal_eval(keyword.value) for keyword in call.keywords if keyword.arg == "needs"), ()))
    except ValueError:
        raise ValueError(f"{path}: the needs of {node.name} must be a literal (the config check reads them "
                         "from the source)") from None


def _declared_ranges(node: ast.FunctionDef, path: Path) -> dict[str, object]:
    """The literal keyword arguments of the function's ``@ranges(...)``, {} without one."""
    call = _decorator_call(node, "ranges")
    try:
        return {} if call is None else {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    except ValueError:
        raise ValueError(f"{path}: the ranges of {node.name} must be literals (the workflow reads them "
                         "from the source)") from None


def _keyword_defaults(node: ast.FunctionDef) -> dict[str, object]:
    defaults = {}
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        try:
            defaults[arg.arg] = None if default is None else ast.literal_eval(default)
        except ValueError:
            raise _NotLiteral from None
    return defaults


def _signature(node: ast.FunctionDef, path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """(keyword defaults, declared ranges) of one function of ``path``."""
    try:
        defaults = _keyword_defaults(node)
    except _NotLiteral:
        fn = inspect.unwrap(getattr(importlib.import_module(f"{__package__}.{path.stem}"), node.name))
        defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return defaults, _declared_ranges(node, path)


@cache
def _module_signatures(path: Path, mtime_ns: int) -> dict[str, tuple[dict, dict, tuple[str, ...]]]:
    """{name: (defaults, declared ranges, needs)} of the stabilizers one module registers (cached per file version)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {name: (*_signature(node, path), _registered_needs(node, path)) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and (name := _registered_name(node)) is not None}


def function_signature(module: str, function: str) -> tuple[dict[str, object], dict[str, object]]:
    """(keyword defaults, declared ranges) of a plain function of this package (e.g. the TIS weight), from source."""
    path = _PACKAGE / f"{module}.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return _signature(node, path)
    raise KeyError(f"stabilizers/{module}.py defines no function {function!r}")


_KNOWN: dict[str, tuple[dict, dict, tuple[str, ...]]] = {}


def _known(name: str) -> tuple[dict, dict, tuple[str, ...]] | None:
    """Rescans the package only for a name not seen before, so a warm lookup is a dict read (which
    torch.compile traces through without a graph break)."""
    if name not in _KNOWN:
        _KNOWN.update(_scan())
    return _KNOWN.get(name)


def keyword_defaults(name: str) -> dict[str, object] | None:
    """The keyword defaults of stabilizer ``name``, None if no module registers it."""
    known = _known(name)
    return None if known is None else known[0]


def declared_ranges(name: str) -> dict[str, object] | None:
    """The ranges stabilizer ``name`` declares (``@ranges``), None if no module registers it."""
    known = _known(name)
    return None if known is None else known[1]


def needs(name: str) -> tuple[str, ...] | None:
    """What stabilizer ``name`` reads of the sampler (its ``@register(..., needs=...)``), None if no module registers it."""
    known = _known(name)
    return None if known is None else known[2]


def _scan() -> dict[str, tuple[dict, dict, tuple[str, ...]]]:
    found = {}
    for path in sorted(_PACKAGE.glob("*.py")):
        if not path.name.startswith("__"):
            found.update(_module_signatures(path, path.stat().st_mtime_ns))
    return found


def signatures() -> dict[str, dict[str, object]]:
    """{stabilizer name: {keyword parameter: default}} over every module of the package (a module
    added since the last call is found: the directory is listed on each call)."""
    return {name: signature[0] for name, signature in _scan().items()}

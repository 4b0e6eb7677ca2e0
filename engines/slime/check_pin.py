"""Check slime and Megatron-LM checkouts against everything engines.slime needs of them (before a re-pin).

    python -m engines.slime.check_pin --slime DIR --megatron DIR [--sglang-server-args FILE]

The sources are read, not imported (as refresh_known_flags reads them). Three lists, taken from the
adapter's own code where they can be, so that they cannot fall behind it:
- flags: every ``--`` literal of engines/slime/flags.py (the launcher's flag table, the flags it
  owns) and every flag engines.slime.loss and engines.slime.params refuse by name must be accepted by
  the checkouts' parsers (refresh_known_flags.known_flags);
- symbols: every name engines/slime/*.py imports from ``slime`` or ``megatron`` (read from their
  import statements, lazy ones included), and every attribute they read of an imported module
  (``mpu.get_data_parallel_group``), defined or imported at the top level of that module; and
  SLIME_MEMBERS, the methods and fields the driver and hooks use on slime's objects;
- files: what the job script runs or sources in slime: scripts/models/<model_type>.sh of every
  model in engines/slime/models.yaml (every lag mode runs the harness's own driver), and the flags
  of each script's MODEL_ARGS equal to the model's ``script_flags`` there (the pre-flight refuses
  them in extra_args: the script's come last and would override them silently).
Prints one line per problem and exits 1 if there is any; the commits are not checked here
(refresh_known_flags and the job script do that).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import yaml

from engines.slime.loss import DATA_AND_OPTIMISATION_FLAGS, UNHANDLED_SLIME_OPTIONS
from engines.slime.params import MODELS, RESUME_BREAKING_FLAGS
from engines.slime.refresh_known_flags import flag_literals, known_flags

HERE = Path(__file__).resolve().parent
ROOTS = ("slime", "megatron")
# Members of slime's classes the adapter uses on instances (no import statement names them):
# (module, class) -> members (methods, fields, attributes a method sets on self). driver: the rollout
# manager, the training group and its trainer actors (a stop's save without the HF copy); metrics: a
# sample's weight versions.
SLIME_MEMBERS = {
    ("slime.ray.rollout", "RolloutManager"): ("generate", "save", "dispose"),
    ("slime.ray.actor_group", "RayTrainGroup"): ("async_train", "update_weights", "save_model", "_actor_handlers"),
    ("slime.backends.megatron_utils.actor", "MegatronTrainRayActor"): ("save_model", "args"),
    ("slime.utils.types", "Sample"): ("weight_versions",),
}


def adapter_flags() -> set[str]:
    return (flag_literals(ast.parse((HERE / "flags.py").read_text())) | {flag for flag, *_ in UNHANDLED_SLIME_OPTIONS}
            | set(DATA_AND_OPTIMISATION_FLAGS) | set(RESUME_BREAKING_FLAGS))


def adapter_symbols() -> set[tuple[str, str]]:
    """(module, name) for every name engines/slime/*.py takes from slime or megatron."""
    needed = set()
    for path in sorted(HERE.glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = {}  # a local name bound to an imported module of slime / megatron -> that module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in ROOTS:
                for alias in node.names:
                    needed.add((node.module, alias.name))
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                needed.add((aliases[node.value.id], node.attr))
    return needed


def module_file(checkouts: dict[str, Path], module: str) -> Path | None:
    base = checkouts[module.split(".")[0]].joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def class_members(path: Path, name: str) -> set[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))} | {
                item.target.id for item in node.body if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)} | {
                target.attr for item in ast.walk(node) if isinstance(item, ast.Assign) for target in item.targets
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}
    return None


def symbol_problems(checkouts: dict[str, Path]) -> list[str]:
    problems = []
    for module, name in sorted(adapter_symbols()):
        path = module_file(checkouts, module)
        if path is None:
            problems.append(f"symbol {module}.{name}: module {module} not found")
        elif name not in top_level_names(path) and module_file(checkouts, f"{module}.{name}") is None:
            problems.append(f"symbol {module}.{name}: {path} defines no {name}")
    for (module, cls), members in SLIME_MEMBERS.items():
        path = module_file(checkouts, module)
        found = class_members(path, cls) if path else None
        if found is None:
            problems.append(f"symbol {module}.{cls}: no class {cls} in {path or module}")
            continue
        problems += [f"symbol {module}.{cls}.{member}: {cls} in {path} has no {member}"
                     for member in members if member not in found]
    return problems


def job_files() -> list[str]:
    """Paths under the slime checkout that the job script runs or sources."""
    return [f"scripts/models/{model}.sh" for model in yaml.safe_load(MODELS.read_text())]


def script_flags(script: Path) -> set[str]:
    """The ``--`` words of a model script's MODEL_ARGS=( ... ) block, comments left out."""
    text = script.read_text()
    block = text[text.index("MODEL_ARGS=(") + len("MODEL_ARGS=("):]
    block = block[:block.index(")")]
    return {word for line in block.splitlines() for word in line.split("#", 1)[0].split() if word.startswith("--")}


def script_flag_problems(slime: Path) -> list[str]:
    """models.yaml's script_flags (what the launcher refuses in extra_args) against each script's MODEL_ARGS."""
    problems = []
    for model, shape in yaml.safe_load(MODELS.read_text()).items():
        script = slime / "scripts" / "models" / f"{model}.sh"
        if not script.is_file():
            continue  # reported as a missing file
        listed, found = set(shape.get("script_flags", [])), script_flags(script)
        problems += [f"model {model}: {script} sets {flag}, missing from script_flags in {MODELS.name}"
                     for flag in sorted(found - listed)]
        problems += [f"model {model}: script_flags in {MODELS.name} lists {flag}, which {script} does not set"
                     for flag in sorted(listed - found)]
    return problems


def check(slime: Path, megatron: Path, sglang_server_args: Path | None = None) -> list[str]:
    """Every problem found, one line each (empty: the checkouts have all the adapter uses)."""
    flags, prefixes = known_flags(slime, megatron, sglang_server_args)
    problems = [f"flag {flag}: no parser of the checkouts accepts it" for flag in sorted(adapter_flags())
                if flag not in flags and not flag.startswith(tuple(prefixes))]
    problems += symbol_problems({"slime": slime, "megatron": megatron})
    problems += [f"file $SLIME_DIR/{name}: missing in {slime}" for name in job_files() if not (slime / name).is_file()]
    return problems + script_flag_problems(slime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slime", type=Path, required=True, help="slime checkout (the commit to pin)")
    parser.add_argument("--megatron", type=Path, required=True, help="Megatron-LM checkout")
    parser.add_argument("--sglang-server-args", type=Path, help="SGLang's srt/server_args.py")
    args = parser.parse_args(argv)
    problems = check(args.slime, args.megatron, args.sglang_server_args)
    for problem in problems:
        print(f"check_pin: {problem}", file=sys.stderr)
    print(f"check_pin: {len(adapter_flags())} flags, {len(adapter_symbols()) + sum(map(len, SLIME_MEMBERS.values()))} "
          f"symbols, {len(job_files())} files checked; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Refresh engines/slime/known_flags.txt: every command-line flag slime's parser accepts, read from sources.

    python -m engines.slime.refresh_known_flags --slime DIR --megatron DIR [--sglang-server-args FILE]

DIR are git checkouts at the commits pinned in envs/slime-container.yaml (checked); inside the pinned
image they are /root/slime and /root/Megatron-LM, and FILE is SGLang's python/sglang/srt/server_args.py
(``python3 -c 'import sglang.srt.server_args as m; print(m.__file__)'``).

The sources are read, not imported (Megatron needs triton and Transformer Engine, slime needs SGLang):
- slime and Megatron: the string literals starting with ``--`` given to any ``add_argument(...)`` (or
  slime's ``reset_arg(parser, ...)``);
- Megatron's ArgumentGroupFactory(<config dataclass>): ``--<field>`` for every annotated field of the
  dataclass and its bases, ``--no-<field>`` / ``--disable-<field>`` for bool fields, and every ``--``
  literal in the class (metadata naming its flags). Excluded fields are kept: the list is a superset,
  which is what a typo check needs;
- SGLang: slime re-exposes ServerArgs' flags as ``--sglang-<flag>``. Without FILE the family is kept
  as the pattern ``--sglang-*`` (and sglang_router's as ``--router-*``), checked by prefix only.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

import yaml

from harness.io import write_text_atomic

HERE = Path(__file__).resolve().parent
KNOWN_FLAGS = HERE / "known_flags.txt"
PIN = HERE.parents[1] / "envs" / "slime-container.yaml"


def _is_flag(value) -> bool:
    return isinstance(value, str) and value.startswith("--") and value[2:3].isalnum() and " " not in value


def flag_literals(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and _is_flag(n.value)}


FLAG_CALLS = ("add_argument", "reset_arg")  # reset_arg: slime's re-definition of a Megatron flag


def add_argument_flags(tree: ast.AST) -> set[str]:
    """``--`` literals passed positionally to any ``*.add_argument(...)`` or ``reset_arg(parser, ...)`` call."""
    flags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in FLAG_CALLS:
            flags |= {arg.value for arg in node.args if isinstance(arg, ast.Constant) and _is_flag(arg.value)}
    return flags


def parse_tree(root: Path) -> dict[Path, ast.AST]:
    return {path: ast.parse(path.read_text(), filename=str(path)) for path in sorted(root.rglob("*.py"))}


def dataclass_flags(trees: dict[Path, ast.AST], factory_classes: set[str]) -> set[str]:
    """The flags ArgumentGroupFactory makes from the named config dataclasses (and their bases)."""
    classes = {node.name: node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    flags, todo, seen = set(), list(factory_classes), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in classes:
            continue
        seen.add(name)
        node = classes[name]
        todo += [base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases]
        flags |= flag_literals(node)
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id[0] != "_":
                field = item.target.id.replace("_", "-")
                flags.add(f"--{field}")
                if "bool" in ast.unparse(item.annotation):
                    flags |= {f"--no-{field}", f"--disable-{field}"}
    return flags


def factory_classes(trees: dict[Path, ast.AST]) -> set[str]:
    return {node.args[0].id for tree in trees.values() for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ArgumentGroupFactory"
            and node.args and isinstance(node.args[0], ast.Name)}


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def known_flags(slime: Path, megatron: Path, sglang_server_args: Path | None) -> tuple[set[str], set[str]]:
    """(flags, prefix patterns) slime's parser accepts."""
    slime_trees = parse_tree(slime / "slime")
    flags = set().union(*(add_argument_flags(tree) for tree in slime_trees.values()))
    megatron_trees = parse_tree(megatron / "megatron")
    training = {path: tree for path, tree in megatron_trees.items() if "training" in path.parts}
    flags |= set().union(*(add_argument_flags(tree) for tree in training.values()))
    flags |= dataclass_flags(megatron_trees, factory_classes(training))
    patterns = {"--router-"}
    if sglang_server_args is None:
        patterns.add("--sglang-")
    else:
        flags |= {"--sglang-" + flag[2:] for flag in add_argument_flags(ast.parse(sglang_server_args.read_text()))}
    return flags, patterns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slime", type=Path, required=True, help="slime checkout at the pinned commit")
    parser.add_argument("--megatron", type=Path, required=True, help="Megatron-LM checkout at the pinned commit")
    parser.add_argument("--sglang-server-args", type=Path, help="SGLang's srt/server_args.py (the pinned version)")
    parser.add_argument("--out", type=Path, default=KNOWN_FLAGS)
    args = parser.parse_args(argv)
    pin = yaml.safe_load(PIN.read_text())
    commits = {"slime": commit_of(args.slime), "megatron_lm": commit_of(args.megatron)}
    wanted = {"slime": pin["slime"]["commit"], "megatron_lm": pin["slime"]["megatron_lm_commit"]}
    if commits != wanted:
        raise SystemExit(f"refresh_known_flags: checkouts at {commits}, {PIN} pins {wanted}")
    flags, patterns = known_flags(args.slime, args.megatron, args.sglang_server_args)
    sglang = f"SGLang {pin['slime']['sglang']} from {args.sglang_server_args}" if args.sglang_server_args else \
        "SGLang: --sglang-* by prefix (no server_args.py given)"
    header = ["# Flags slime's parser accepts; written by python -m engines.slime.refresh_known_flags.",
              f"# slime {commits['slime']}, Megatron-LM {commits['megatron_lm']}; {sglang}.",
              "# A line ending in '*' is a prefix family (checked by prefix only)."]
    lines = header + sorted(flags) + sorted(f"{p}*" for p in patterns)
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"refresh_known_flags: {len(flags)} flags, {len(patterns)} prefix families -> {args.out}")


if __name__ == "__main__":
    main()

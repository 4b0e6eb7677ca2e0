"""Where a config error is (issue 64): each 'config key ...' line of a ConfigError ends with the file and line
that set the key, and an unknown name gets the nearest valid one.

    config key 'recipes[3]': unknown recipe 'sat_gpso' (did you mean sat_gspo?); available: ... (config.yaml, line 11)

The line comes from the YAML file's node marks (yaml.compose), so it is the line of the value itself, in a
flow list too. A key given on the command line (``-C key=value``) is not looked up in a file.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import yaml

KEY = re.compile(r"config key '([^']+)'")
PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def nearest(name: str, choices) -> str:
    """' (did you mean X?)' for the valid name closest to ``name`` (difflib), or '' when none is close."""
    close = difflib.get_close_matches(str(name), [str(choice) for choice in choices], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def key_line(path: Path, key: str) -> int | None:
    """The 1-based line of ``key`` ('recipes[3]', 'eval.k') in the YAML file ``path``: of its value, or of
    the deepest enclosing key the file sets; None when the file does not set the key's top level."""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for name, index in PART.findall(key):
        if isinstance(node, yaml.MappingNode) and name:
            found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == name]
            if not found:
                break
            line, node = found[0][0].start_mark.line + 1, found[0][1]
        elif isinstance(node, yaml.SequenceNode) and index and int(index) < len(node.value):
            node = node.value[int(index)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def with_lines(message: str, files: list[Path], given: set[str] = frozenset()) -> str:
    """``message`` with each 'config key K' line ending in the last of ``files`` that sets K (the later file
    wins, as in Snakemake); a top-level key in ``given`` (set on the command line) is named as such."""
    lines = []
    for text in message.splitlines():
        match = KEY.search(text)
        if match:
            top = PART.match(match.group(1)).group(0)
            if top in given:
                text += f" (-C {top}=...)"
            else:
                where = [(path, key_line(path, match.group(1))) for path in files]
                where = [(path, line) for path, line in where if line is not None]
                if where:
                    text += f" ({where[-1][0]}, line {where[-1][1]})"
        lines.append(text)
    return "\n".join(lines)

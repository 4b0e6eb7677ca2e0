"""The command-line plumbing every stage's ``python -m ...`` entry point shares."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_json_arg(value: str, flag: str) -> dict:
    """A JSON object given inline or as a path to a file holding one; a bad one exits naming ``flag``."""
    text = Path(value).read_text() if not value.lstrip().startswith("{") and Path(value).is_file() else value
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise SystemExit(f"{flag}: not valid JSON ({error})") from None
    if not isinstance(obj, dict):
        raise SystemExit(f"{flag}: expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_config(parser: argparse.ArgumentParser, text: str) -> dict:
    """A --config-json argument, validated (harness.config) before any work; errors name the key."""
    from harness.config import ConfigError, validate

    try:
        return validate(json.loads(text))
    except json.JSONDecodeError as error:
        parser.error(f"--config-json is not valid JSON: {error}")
    except ConfigError as error:
        parser.error(str(error))


def run_stage(prog: str, work, describe) -> int:
    """Run ``work()``; bad input or a missing/malformed file (ValueError, OSError) is one clear
    line and exit status 2, success one line ``describe(result, seconds)``."""
    start = time.perf_counter()
    try:
        result = work()
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"{prog}: {describe(result, time.perf_counter() - start)}", file=sys.stderr)
    return 0

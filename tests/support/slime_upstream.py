"""slime and Megatron-LM at the pinned commits (../shared/upstream, README.md there), used by path:
the tests check the adapter against slime's own code, never a copy of it.

``upstream_dir()`` finds the trees ($STALEBENCH_UPSTREAM, else ../shared/upstream beside the
checkout); where they are missing the calling test skips naming them, unless $STALEBENCH_REQUIRE
names "upstream" (tests/support/optional.py).

``slime_parsed_args(argvs)`` runs slime's own argument code (slime/utils/arguments.py at the pin:
``get_slime_extra_args_provider`` and ``slime_validate_args``) on each job argument list, in a
subprocess with the upstream slime tree first on sys.path (the in-process tests put a stand-in
under the name ``slime``), and returns the attributes of the resulting args.

What cannot run on a CPU, and why (measured on the 2-core dev box, torch 2.13.0+cpu):
- slime's ``parse_args`` as a whole: its phase 1 is SGLang's ``ServerArgs`` parser
  (slime/backends/sglang_utils/arguments.py imports ``sglang.srt.server_args``). SGLang 0.5.15.post1
  with its dependencies pins torch==2.11.0 (the CUDA build), flashinfer, cutlass-dsl and
  flash-attn-4 (GBs); installed ``--no-deps`` (12.8 MB wheel, 191 MB unpacked) its import tree still
  needs triton at module level (sglang/srt/utils/common.py; the triton wheel unpacks to ~1 GB) and
  torchvision (common.py, multimodal/internvl_utils.py), whose only build for torch 2.13.0 on the
  reachable indexes (PyPI 0.28.0) links libtorch_cuda.so / libc10_cuda.so, which the CPU torch
  lacks; with SGLang's own triton stub (sglang/_triton_stub.py) and torchvision mocked it still
  stops in transformers 5.12.1 (AutoImageProcessor requires torchvision). So the SGLang parser
  (phase 1) and SGLang's validate_args (phase 3) are not run; they parse and check only --sglang-*
  and router flags, which the adapter's loss and flag checks do not read.
- Megatron's parser (phase 2's base, megatron/training/arguments.py) imports megatron.core, which
  imports triton at module level: not run either. Its flags are the ones slime's parser leaves
  unknown (parse_known_args); slime_validate_args reads none of them. The three flags slime's
  ``_pre_parse_mode`` parses apart (--debug-rollout-only, --debug-train-only,
  --load-debug-rollout-data) and --train-backend are set as it would set them.
What does run is slime's own: every slime flag's definition and default, and slime_validate_args
(which, among others, sets use_routing_replay whenever use_rollout_routing_replay is given:
slime/utils/arguments.py 2010-2011). The three slime modules arguments.py imports for phase 1 and
3 and for logging (sglang_utils.arguments, sglang_utils.external, observability.logging_utils:
SGLang, ray, wandb) are replaced by modules whose functions raise when called; neither code path run
here calls them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.optional import missing

REPO = Path(__file__).resolve().parents[2]
SETTING = "STALEBENCH_UPSTREAM"

def upstream_dir() -> Path:
    """The folder holding slime/ and Megatron-LM/ at the pinned commits; skips (or fails) without it."""
    root = Path(os.environ.get(SETTING) or REPO.parent / "shared" / "upstream")
    absent = [name for name in ("slime", "Megatron-LM") if not (root / name).is_dir()]
    if absent:
        missing("upstream", f"the upstream trees {', '.join(absent)} are not in {root} (set ${SETTING})")
    return root


def slime_parsed_args(argvs: list[list[str]]) -> list[dict]:
    """Each argument list parsed and validated by slime's own argument code; the args as a dict."""
    root = upstream_dir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "slime"), str(REPO)])}
    result = subprocess.run([sys.executable, "-m", "tests.support.slime_upstream", json.dumps(argvs)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"slime's argument code failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def _raising_module(name: str, why: str, functions: tuple[str, ...]):
    import types

    def unavailable(*_args, **_kwargs):
        raise RuntimeError(f"{name} is not importable on a CPU ({why}); the tests never call it")

    module = types.ModuleType(name)
    for function in functions:
        setattr(module, function, unavailable)
    return module


def _parse_with_slime(argv: list[str]) -> dict:
    import argparse

    from slime.utils import arguments  # slime's module, from the upstream tree

    parser = argparse.ArgumentParser(allow_abbrev=False)
    arguments.get_slime_extra_args_provider()(parser)
    args, _megatron_and_sglang_flags = parser.parse_known_args(argv)
    for flag in ("--debug-rollout-only", "--debug-train-only"):  # slime's _pre_parse_mode flags
        setattr(args, flag[2:].replace("-", "_"), flag in argv)
    args.train_backend, args.load_debug_rollout_data = "megatron", None
    arguments.slime_validate_args(args)
    return {key: value for key, value in vars(args).items() if _is_json(value)}


def _is_json(value) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def main() -> None:
    sys.modules.update({
        "slime.backends.sglang_utils.arguments": _raising_module(
            "sglang.srt.server_args", "it imports triton and a CUDA torchvision", ("sglang_parse_args", "validate_args")),
        "slime.backends.sglang_utils.external": _raising_module(
            "slime.backends.sglang_utils.external", "it starts SGLang engines with ray",
            ("apply_external_engine_info_to_args",)),
        "slime.observability.logging_utils": _raising_module(
            "slime.observability.logging_utils", "wandb", ("configure_logger",)),
    })
    print(json.dumps([_parse_with_slime(argv) for argv in json.loads(sys.argv[1])]))


if __name__ == "__main__":
    main()

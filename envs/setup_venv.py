"""Create the project's virtual environment (``make setup``): uv where it installs, pip otherwise.

    python3 envs/setup_venv.py --venv .venv --uv-version 0.13.9

Either way the same pinned set: the project with its dev extras, constrained by requirements.lock,
in a venv made by ``python -m venv`` (so $VENV/bin/python, pip, snakemake and pytest are where other
tooling looks for them). uv is installed into the venv from PyPI at the pinned version; if that
fails, pip does every step.

uv reads no pip configuration, so the setup hands it pip's configured sources (index, extra indexes,
wheel folders: `pip config list`, files and PIP_* variables), choosing among them as pip does (the
best version over all of them): a machine's mirror or local wheels serve uv as they serve pip.

torch is the one package whose build depends on the machine. PyPI's Linux wheel is the CUDA build
(and pulls several GB of nvidia-* wheels), so on a machine without an NVIDIA GPU torch comes from
PyTorch's CPU index, an explicit source for torch alone ([tool.uv.sources] in pyproject.toml, as uv
documents). Where that index cannot be reached, torch is the best build of the locked version that
PyPI and pip's configured sources have (a CPU wheel only where a mirror or wheel folder holds one).
The last line printed says which build was installed and why.

Every installed module is compiled to bytecode at setup (uv's --compile-bytecode; pip compiles by
default): uv compiles nothing unless asked, and an environment that sets PYTHONDONTWRITEBYTECODE never
caches what an import compiles, so every job would recompile torch, lm-eval and sympy (issue 35:
~8 s of each train job and ~10 s of each evaluate job on a 2-core AVX2 laptop). The compiled files
are written whatever PYTHONDONTWRITEBYTECODE says, and it lets Python read them.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # the same URL as [[tool.uv.index]] in pyproject.toml
PROJECT = ["-c", str(LOCK), "-e", f"{ROOT}[dev]"]


def locked_torch() -> str:
    """The requirement ``torch==<version>`` as requirements.lock pins it."""
    for line in LOCK.read_text().splitlines():
        if line.startswith("torch=="):
            return line.strip()
    raise SystemExit(f"setup: {LOCK} pins no torch version (a line torch==<version>)")


def has_nvidia_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return listing.returncode == 0 and "GPU" in listing.stdout


def cpu_index_error() -> str | None:
    """None when PyTorch's CPU index answers, else why not."""
    try:
        urllib.request.urlopen(f"{CPU_INDEX}/torch/", timeout=15).close()
        return None
    except (urllib.error.URLError, OSError) as error:
        return str(getattr(error, "reason", error))


PIP_TO_UV = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}


def pip_sources(pip_config: str) -> list[str]:
    """uv's options for the package sources in ``pip config list``'s output (lines key='value'), each once."""
    options: list[str] = []
    for line in pip_config.splitlines():
        key, _, value = line.partition("=")
        flag = PIP_TO_UV.get(key.rpartition(".")[2])
        for source in value.strip().strip("'\"").split() if flag else []:
            if source not in options:
                options += [flag, source]
    return options + ["--index-strategy", "unsafe-best-match"] if options else []  # pip's choice among indexes


def install_steps(venv: Path, uv: bool, gpu: bool, index_error: str | None, torch: str,
                  pip_config: str) -> tuple[list[list[str]], str]:
    """(the commands that install the venv's packages, why torch is the build it will be)."""
    if gpu:
        why = "an NVIDIA GPU is present (nvidia-smi): the best torch of PyPI (its CUDA build) and pip's configured sources"
    elif index_error is None:
        why = f"no NVIDIA GPU (nvidia-smi): torch from PyTorch's CPU index {CPU_INDEX}"
    else:
        why = (f"no NVIDIA GPU (nvidia-smi), but {CPU_INDEX} cannot be reached ({index_error}): "
               "the best torch of PyPI and pip's configured sources")
    if not uv:
        pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
        torch_source = ["--index-url", CPU_INDEX] if not gpu and index_error is None else []
        return [pip + ["--upgrade", "pip"], pip + torch_source + [torch], pip + PROJECT], why
    uv_install = [str(venv / "bin" / "uv"), "pip", "install", "--quiet", "--compile-bytecode",
                  "--python", str(venv / "bin" / "python")]
    # pyproject's [tool.uv.sources] sends torch to the CPU index; --no-sources leaves it to the other sources
    sources = [] if not gpu and index_error is None else ["--no-sources"]
    return [uv_install + pip_sources(pip_config) + sources + PROJECT], why


def torch_build(venv: Path) -> str:
    """e.g. 'torch 2.13.0+cpu, the CPU build' as the venv's torch reports itself."""
    probe = "import torch; print(torch.__version__, torch.version.cuda or '')"
    version, _, cuda = subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=True, capture_output=True,
                                      text=True).stdout.strip().partition(" ")
    return f"torch {version}, the " + (f"CUDA {cuda} build" if cuda else "CPU build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=Path(".venv"))
    parser.add_argument("--uv-version", required=True, help="the uv release installed from PyPI")
    args = parser.parse_args(argv)
    venv = args.venv.resolve()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    uv = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"uv=={args.uv_version}"]).returncode == 0
    if not uv:
        print(f"setup: uv=={args.uv_version} could not be installed from PyPI; installing with pip", flush=True)
    gpu = has_nvidia_gpu()
    pip_config = subprocess.run([str(venv / "bin" / "pip"), "config", "list"], capture_output=True, text=True).stdout
    steps, why = install_steps(venv, uv, gpu, None if gpu else cpu_index_error(), locked_torch(), pip_config)
    for step in steps:
        if subprocess.run(step).returncode != 0:
            raise SystemExit(f"setup: failed: {' '.join(step)}")
    build = torch_build(venv)
    print(f"setup: installed {build} with {'uv ' + args.uv_version if uv else 'pip'}: {why}", flush=True)
    if not gpu and "CUDA" in build:
        print("setup: this CUDA build runs on CPU too, but its nvidia-* libraries took GBs of download and disk; "
              f"once {CPU_INDEX} is reachable, `rm -r {venv}` and `make setup` again installs the CPU build",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`stalebench run`: the workflow (Snakemake, its options passed through) as a person starts it, and starts
it again after a kill.

    stalebench run                                  # the demo grid of config.yaml, on every core
    stalebench run -c2 -C grid=quick steps=40       # Snakemake's options as they are (a grid of its own)
    stalebench run --configfile my.yaml -n          # another config, checked first (file, line); the plan

Before Snakemake starts: each --configfile is checked as `stalebench check` does (Snakemake itself reads it
before any project code and names neither line nor column). While it runs, the command holds the lock
`<workdir>/.snakemake/stalebench.lock` (harness.lock): a second `stalebench run` in the same working folder
is refused naming the first, and so is one beside a live bare `snakemake` there. A workflow killed (kill -9,
a lost terminal) leaves Snakemake's lock and its incomplete-output markers; neither can belong to a live
workflow once this lock is ours and no snakemake process works in the folder, so the command clears them
itself (`snakemake --unlock`, then `--rerun-incomplete`), says so in one line, and the run resumes: the
runs' own resume (harness.engine) redoes nothing finished. A dry run (-n) takes no lock and writes nothing.

Snakemake's error messages are shown without the absolute paths of the project's own code, and a traceback
only with --verbose (Snakemake's own flag, passed through).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

from harness.cli import EXIT_LOCKED
from harness.lock import RunLocked, writer_lock

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
DRY = {"-n", "--dry-run", "--dryrun"}
CORES = ("-c", "--cores", "-j", "--jobs", "--profile", "--workflow-profile")
# "WorkflowError in file /abs/workflow/rules/common.smk, line 36:" -> "WorkflowError:"
CLOSING = "stalebench: the "  # closing_lines' prefix
WHERE = re.compile(r" in (?:rule \S+ in )?(?:file|line \d+ of) \S+(?:, line \d+)?:")


def option(args: list[str], *names: str) -> list[str]:
    """The values of a Snakemake option given as `--name VALUE` or `--name=VALUE` (short: `-dVALUE`)."""
    values = []
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                values.append(args[i + 1])
            elif arg.startswith(f"{name}="):
                values.append(arg.split("=", 1)[1])
            elif len(name) == 2 and arg.startswith(name) and len(arg) > 2 and not arg.startswith("--"):
                values.append(arg[2:])
    return values


def live_snakemake(workdir: Path) -> list[int]:
    """The ids of snakemake processes (other than this one's) working in ``workdir``."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = process.info
        words = info["cmdline"] or []
        runs_snakemake = any(Path(word).name == "snakemake" for word in words[:3])
        if runs_snakemake and info["pid"] not in mine and info["cwd"] and Path(info["cwd"]) == workdir:
            found.append(info["pid"])
    return found


def left_behind(workdir: Path) -> list[str]:
    """What a dead workflow left in ``workdir``'s .snakemake/: its lock files, its incomplete-output markers."""
    state = workdir / ".snakemake"
    return [name for name in ("locks", "incomplete") if (state / name).is_dir() and any((state / name).iterdir())]


def quiet(line: str, verbose: bool) -> str | None:
    """A line of Snakemake's output as a person reads it: no path into the project's code, no traceback."""
    if verbose:
        return line
    if line.startswith(("Traceback (most recent call last)", "  File ")) or "/site-packages/" in line:
        return None
    return WHERE.sub(":", line).replace(f"{ROOT}{os.sep}", "")


def snakemake(args: list[str], verbose: bool) -> int:
    """Snakemake with ``args``, its output (stdout and stderr, in order) shown line by line through ``quiet``;
    the closing lines (``closing_lines``, printed by the Snakefile's onsuccess) last, after Snakemake's own."""
    closing = []
    with subprocess.Popen([SNAKEMAKE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as process:
        for line in process.stdout:
            shown = quiet(line, verbose)
            if shown is not None and shown.startswith(CLOSING):
                closing.append(shown)
            elif shown is not None:
                sys.stdout.write(shown)
                sys.stdout.flush()
    sys.stdout.write("".join(closing))
    return process.returncode


def run(argv: list[str], prog: str = "stalebench run") -> int:
    from grid.config import main as check

    args = list(argv)
    if set(args) & {"-h", "--help"}:
        print(f"usage: {prog} [SNAKEMAKE OPTIONS]\n\n{__doc__}\nSnakemake's options: {SNAKEMAKE} --help")
        return 0
    if check(option(args, "--configfile", "--configfiles")):
        return 2
    if not option(args, "-s", "--snakefile"):
        args = ["-s", str(ROOT / "Snakefile"), *args]
    if not any(arg.split("=", 1)[0] in CORES or re.fullmatch(r"-[cj]\d+", arg) for arg in args):
        args = ["--cores", "all", *args]
    verbose = "--verbose" in args
    if DRY & set(args):
        return snakemake(args, verbose)
    workdir = Path(option(args, "-d", "--directory")[-1] if option(args, "-d", "--directory") else ".").resolve()
    try:
        with writer_lock(workdir / ".snakemake" / "stalebench.lock", prog):
            others = live_snakemake(workdir)
            if others:
                raise RunLocked(f"snakemake (pid {', '.join(map(str, others))}) is running in {workdir}; "
                                "wait for it to end, or stop it and run again")
            stale = left_behind(workdir)
            if stale:
                subprocess.run([SNAKEMAKE, *args, "--unlock"], capture_output=True, text=True, check=True)
                print(f"{prog}: the last workflow in {workdir} was killed; cleared its Snakemake "
                      f"{' and '.join(stale)} (--unlock, then --rerun-incomplete) and resume", file=sys.stderr)
                args = [*args, "--rerun-incomplete"]
            return snakemake(args, verbose)
    except RunLocked as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_LOCKED


def closing_lines(grid_dir) -> list[str]:
    """The last lines of a finished workflow (the Snakefile's onsuccess): where the grid's claims are, as a
    file and, once tracked, in the MLflow UI. ``grid_dir``: its grid.folder.GridDir."""
    from harness.io import read_json
    from tracking.store import parent_link

    lines = []
    if grid_dir.mlflow_path.exists():
        marker = read_json(grid_dir.mlflow_path)
        served = marker["tracking_uri"].startswith(("http://", "https://"))
        base = marker["tracking_uri"] if served else "http://127.0.0.1:5000"
        link = parent_link(base, marker["experiment_id"], marker["parent_run_id"])
        lines.append(f"stalebench: the claims: {link}" + ("" if served else
                     f"  (after `stalebench ui --grid {grid_dir.path.name}`)"))
    if grid_dir.table_path("md").exists():
        lines.append(f"stalebench: the table: {grid_dir.table_path('md')}")
    return lines

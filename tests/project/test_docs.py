"""The documentation a newcomer reads: every relative link resolves, the README stays short, and
the prose names no commit (a hash goes stale the day it is written)."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.workflow_cli import SNAKEMAKE

DOCS = sorted({ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "engines" / "tiny" / "README.md",
               *(ROOT / "docs").glob("*.md"), *(ROOT / "eval" / "tasks").glob("*/README.md")})
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def prose(path: Path) -> str:
    """The text outside code blocks and inline code."""
    return INLINE_CODE.sub("", FENCE.sub("", path.read_text()))


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_documents_exist():
    names = {str(path.relative_to(ROOT)) for path in DOCS}
    assert {"README.md", "docs/cluster.md", "docs/statistics.md", "docs/mlflow.md", "benchmarks/README.md",
            "eval/tasks/tiny/README.md", "eval/tasks/aime/README.md"} <= names


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(doc)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    assert not broken_links(doc), f"{doc.relative_to(ROOT)}: " + "; ".join(broken_links(doc))


def test_the_readme_is_read_in_ten_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_commit_hash_in_prose(doc):
    assert not HASH.findall(prose(doc))


def test_the_link_check_sees_a_broken_link_and_a_missing_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# Some Title, with punctuation\n")
    (tmp_path / "a.md").write_text("# A\n[ok](b.md#some-title-with-punctuation) [self](#a) [gone](c.md) "
                                   "[anchor](b.md#nowhere) [web](https://example.org)\n```\n[in code](d.md)\n```\n")
    assert [problem.split(":")[0] for problem in broken_links(tmp_path / "a.md")] == ["c.md", "b.md#nowhere"]


def test_the_hash_check_sees_a_short_commit_and_not_a_date_or_a_word():
    assert HASH.findall("measured at 8309be1 on 2026-12-01, a decade of facade") == ["8309be1"]


# --- the README's own commands work as printed (in dry-run form) ----------------------------------

README_SECTIONS = ("Quick start", "Two commands")  # the sections a newcomer types from first


def readme_commands() -> list[str]:
    """The shell commands of the README's first sections: the lines of their code blocks and the
    inline code that runs make or snakemake, comments dropped."""
    text = (ROOT / "README.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    chosen = [s for s in sections if s.split("\n", 1)[0].strip() in README_SECTIONS]
    assert chosen, f"README.md has none of the sections {README_SECTIONS}"
    commands = []
    for section in chosen:
        for block in re.findall(r"^```(?:bash|sh)?\n(.*?)^```", section, re.M | re.S):
            commands += [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
        commands += [code for code in re.findall(r"`([^`\n]+)`", FENCE.sub("", section))
                     if re.match(r"(\.venv/bin/snakemake|make) ", code)]
    return commands


def dry_run(command: str, results_dir: Path) -> list[str]:
    """The command's `snakemake -n` form (its outputs under ``results_dir``), and for `make X` the
    snakemake commands `make -n X` says it runs; `make -n` itself must succeed."""
    args = shlex.split(command)
    if args[0] == "make":
        planned = subprocess.run(["make", "-n", *args[1:]], cwd=ROOT, capture_output=True, text=True)
        assert planned.returncode == 0, f"make -n {' '.join(args[1:])}: {planned.stderr}"
        return [runs for line in planned.stdout.splitlines() for runs in dry_run(line, results_dir)
                if re.match(r"\S*/snakemake ", line)]
    if not args[0].endswith("/snakemake"):
        return []
    args = [arg for arg in args[1:] if arg != "-n"]  # -n first: the same plan printed twice runs once
    at = args.index("-C") + 1 if "-C" in args else len(args)
    extra = [] if "-C" in args else ["-C"]
    return [shlex.join([SNAKEMAKE, "-n", *args[:at], *extra, f"results_dir={results_dir}", *args[at:]])]


@pytest.mark.slow  # a Snakemake dry run per command
def test_the_readmes_commands_plan(tmp_path):
    """`make demo`, `make test` and every snakemake command of the README's first sections plan
    (`make -n`, `snakemake -n`): an override example refused by the config check fails here."""
    commands = readme_commands()
    assert "make demo" in commands and any("recipes=" in c for c in commands), commands
    planned = sorted({run for command in commands for run in dry_run(command, tmp_path)})
    assert len(planned) >= 2, planned  # the demo's plan and the narrowed grid's
    for run in planned:
        result = subprocess.run(shlex.split(run), cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{run}:\n{result.stderr[-3000:]}"
        assert "Job stats:" in result.stdout + result.stderr, run
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


def test_the_dry_run_form_of_a_command(tmp_path):
    assert dry_run(".venv/bin/snakemake -c2 -C steps=40 'seeds=[0]'", tmp_path) == [shlex.join(
        [SNAKEMAKE, "-n", "-c2", "-C", f"results_dir={tmp_path}", "steps=40", "seeds=[0]"])]
    assert dry_run(".venv/bin/snakemake -c2 -n", tmp_path) == dry_run(".venv/bin/snakemake -c2", tmp_path) == [
        shlex.join([SNAKEMAKE, "-n", "-c2", "-C", f"results_dir={tmp_path}"])]
    assert dry_run("make -n", tmp_path) == [] and dry_run("python -m pytest", tmp_path) == []


# --- the design is in the repository: no file names a path outside it ------------------------------

OUTSIDE = re.compile("|".join([
    r"shared" "/(?!data\\b|upstream\\b)",  # ../shared/data and ../shared/upstream: optional test inputs
    r"/work" "/",
]))


def test_no_tracked_file_names_a_path_outside_the_repository():
    assert (ROOT / "docs" / "design.md").is_file()
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if not path.is_file() or path.suffix in (".png", ".pdf", ".safetensors"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "\n".join(found)


def test_the_outside_path_check_sees_the_design_and_spares_the_test_inputs():
    assert OUTSIDE.search("see shared" "/DESIGN.md") and OUTSIDE.search("in /work" "/notes")
    assert not OUTSIDE.search('aime="$(cd .. && pwd)/shared/data/aime24.jsonl"')
    assert not OUTSIDE.search("the pinned trees in ../shared/upstream")

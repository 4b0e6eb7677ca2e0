"""The documentation a newcomer reads: every relative link resolves, the README stays short (words) and
narrow (characters per line), and the prose names no commit (a hash goes stale the day it is written). The
README's commands run in order: test_readme.py."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

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


WORDS = 1200  # about eight minutes of reading; a finding's detail goes to docs/findings.md
WIDE = 120  # characters: a line a reader sees whole beside the code


def test_the_readme_is_read_in_ten_minutes():
    """Capped by words, not lines: a line count invites long lines (issue 60, item 4)."""
    words = len(prose(ROOT / "README.md").split())
    assert words <= WORDS, f"README.md: {words} words of prose, over {WORDS}: move detail to docs/"


@pytest.mark.parametrize("doc", ["README.md", "tests/README.md"])
def test_no_line_is_wider_than_a_reader_sees(doc):
    wide = [f"{doc}:{n}: {len(line)}" for n, line in enumerate((ROOT / doc).read_text().splitlines(), 1)
            if len(line) > WIDE]
    assert not wide, wide


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

"""The one shape of a report section and its one renderer per format: every section of table.md and
table.tex (the claims, the cell tables, the exploratory sections, the conclusions, the tuning pick, a
grid beside this one, provenance and compute) is a ``Section``: a title and its blocks in order, each a
paragraph (a string), a ``Bullets`` list or a ``Table``. table.csv is not sections: it is one wide
machine-readable table (analysis.report.tables.render_csv)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, header, rows) -> "Table":
        return cls(tuple(header), tuple(tuple(row) for row in rows))


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    title: str
    blocks: tuple[str | Bullets | Table, ...]

    @classmethod
    def table(cls, title: str, header, rows) -> "Section":
        """A section that is one table: its title is the table's caption."""
        return cls(title, (Table.of(header, rows),))


def markdown(sections: list[Section]) -> list[str]:
    """Each section as "## title", a blank line, and each block followed by a blank line."""
    lines = []
    for section in sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                lines += ["| " + " | ".join(block.header) + " |", "|" + "---|" * len(block.header),
                          *("| " + " | ".join(row) + " |" for row in block.rows)]
            elif isinstance(block, Bullets):
                lines += [f"- {item}" for item in block.items]
            else:
                lines.append(block)
            lines.append("")
    return lines


def tex(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"),
                          ("#", r"\#"), ("–", "--"), ("|", r"$|$"), ("<", r"$<$"), (">", r"$>$")):
        text = text.replace(char, escaped)
    return text


def _tabular(table: Table, caption: str | None) -> list[str]:
    return [r"\begin{table}[ht]", r"\centering", r"\small",
            *([f"\\caption{{{tex(caption)}}}"] if caption is not None else []),
            r"\begin{tabular}{l" + "l" * (len(table.header) - 1) + "}", r"\hline",
            " & ".join(tex(h) for h in table.header) + r" \\", r"\hline",
            *(" & ".join(tex(v) for v in row) + r" \\" for row in table.rows),
            r"\hline", r"\end{tabular}", r"\end{table}", ""]


def latex(sections: list[Section]) -> list[str]:
    """A one-table section as a captioned table; any other as a paragraph heading and its blocks."""
    parts = []
    for section in sections:
        if len(section.blocks) == 1 and isinstance(section.blocks[0], Table):
            parts += _tabular(section.blocks[0], section.title)
            continue
        parts.append(f"\\paragraph{{{tex(section.title)}}}")
        for block in section.blocks:
            if isinstance(block, Table):
                parts += _tabular(block, None)
            elif isinstance(block, Bullets):
                parts += [r"\begin{itemize}", *(f"\\item {tex(item)}" for item in block.items), r"\end{itemize}", ""]
            else:
                parts += [tex(block), ""]
    return parts

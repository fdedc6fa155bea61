"""Every terminal table of both CLIs, laid out so that no number or identifier is ever split or cut.

A table (a Grid) is measured before it is drawn: a column that wraps (prose: a finding, a note, a
next step) needs its longest word, one that does not (numbers, ids, "640 MiB", "TP 2 x PP 1")
needs its longest cell, and every header may wrap between its words. When the sum fits the
terminal, the table is drawn with widths chosen here (rich's own shrinking would cut a word in a
narrow column: "evidenc e", "1, 024"); when it does not, the next, narrower layout given is tried,
and below the narrowest one (or where a cell would wrap into more than MAX_CELL_LINES lines: a long
finding in a narrow column) each row is printed as a block of "key: value" lines, which fits any
width. Nothing is ever truncated with "…".

Cells are plain text or rich `Text` (for colour): never markup, so run-supplied strings (a level
id, an error) cannot inject any. docs/cli.md ("Narrow terminals") describes the result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, Sequence, Union

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

Cell = Union[str, Text]
Justify = Literal["left", "right", "center"]
JUSTIFY: tuple[Justify, ...] = ("left", "right", "center")


@dataclass(frozen=True)
class Column:
    name: str  # the header; "\n" splits it on purpose
    justify: Justify = "left"
    # May a cell wrap between its words? Default: left-aligned text wraps, right-aligned figures
    # do not ("640 MiB" stays on one line). Nothing ever breaks inside a word.
    wrap: bool | None = None
    # Group rows by this column: the table shows a value once per run of equal values (and rules
    # a line under the run); blocks print it as a heading.
    group: bool = False

    def __post_init__(self) -> None:
        if self.justify not in JUSTIFY:
            raise ValueError(f"justify must be one of {JUSTIFY}, got {self.justify!r}")

    @property
    def wraps(self) -> bool:
        return self.justify == "left" if self.wrap is None else self.wrap


@dataclass
class Grid:
    title: str
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    dense: bool = False  # no borders, no padding: a space between columns
    # Figures read apart without borders: when the boxed table does not fit, try it dense first.
    box_optional: bool = False

    def __post_init__(self) -> None:
        for row in self.rows:
            self._check(row)

    def add_row(self, *cells: Cell) -> None:
        row = list(cells)
        self._check(row)
        self.rows.append(row)

    def _check(self, row: list[Cell]) -> None:
        if len(row) != len(self.columns):
            raise ValueError(f"{self.title!r}: a row of {len(row)} cells for {len(self.columns)} columns")


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


def _longest_word(text: str) -> int:
    return max((Text(w).cell_len for w in text.split()), default=0)


def _longest_line(text: str) -> int:
    return max((Text(line).cell_len for line in text.splitlines()), default=0)


def column_bounds(grid: Grid, index: int) -> tuple[int, int, int]:
    """(minimum, cells, natural) content widths of a column: the minimum keeps every word (every
    cell, for a column that does not wrap) whole; at `cells` each cell sits on one line; at
    `natural` the header does too."""
    col = grid.columns[index]
    cells = [_text(row[index]).plain for row in grid.rows]
    least = max(
        [_longest_word(col.name)] + [(_longest_word if col.wraps else _longest_line)(c) for c in cells], default=1
    )
    one_line = max([least] + [_longest_line(c) for c in cells])
    return max(least, 1), max(one_line, 1), max(one_line, _longest_line(col.name), 1)


def _overhead(grid: Grid) -> int:
    """Columns of borders and padding the table adds to its cells' widths (see _table)."""
    n = len(grid.columns)
    return n - 1 if grid.dense else 3 * n + 1  # dense: one space apart; else "│ a │ b │"


def needed_width(grid: Grid) -> int:
    """The narrowest terminal that shows the grid as a table with no word broken."""
    return sum(column_bounds(grid, i)[0] for i in range(len(grid.columns))) + _overhead(grid)


def _widths(grid: Grid, width: int) -> list[int] | None:
    """Content widths that fit `width`, or None: each column at least its minimum; the room left
    puts cells on one line first (a header wraps more cheaply than a figure), then headers; at
    each stage the columns that need least more come first (a plan label, a metric name), the
    long prose last."""
    bounds = [column_bounds(grid, i) for i in range(len(grid.columns))]
    room = width - _overhead(grid) - sum(b[0] for b in bounds)
    if room < 0:
        return None
    widths = [b[0] for b in bounds]
    for stage in (1, 2):
        wants = [b[stage] - w for b, w in zip(bounds, widths)]
        order = sorted(range(len(wants)), key=lambda i: wants[i])
        for k, i in enumerate(order):
            give = min(wants[i], room // (len(order) - k))
            widths[i] += give
            room -= give
    return widths


def _table(grid: Grid, widths: list[int]) -> Table:
    table = Table(
        title=Text(grid.title) if grid.title else None,
        title_justify="left",
        caption_justify="left",
        caption=Text(grid.caption) if grid.caption else None,
        box=box.SIMPLE_HEAD if grid.dense else box.HEAVY_HEAD,
        show_edge=not grid.dense,
        padding=(0, 0) if grid.dense else (0, 1),
        pad_edge=not grid.dense,
        expand=False,
    )
    for col, w in zip(grid.columns, widths):
        # Widths hold every cell of a column that does not wrap on one line already; wrapping stays
        # allowed so that its header may take two lines.
        table.add_column(Text(col.name), justify=col.justify, width=w, overflow="fold")
    keys = [_group_key(grid, row) for row in grid.rows]
    for k, row in enumerate(grid.rows):
        cells = [_text(c) for c in row]
        if k and keys[k] and keys[k] == keys[k - 1]:  # the group's value once, on its first row
            cells = [Text("") if grid.columns[i].group else c for i, c in enumerate(cells)]
        last_of_group = bool(keys[k]) and (k + 1 == len(keys) or keys[k + 1] != keys[k])
        table.add_row(*cells, end_section=last_of_group)
    return table


def _group_key(grid: Grid, row: list[Cell]) -> str:
    """The row's group ("" without a group column): its group columns' values."""
    return " · ".join(_text(row[i]).plain for i, c in enumerate(grid.columns) if c.group)


def hanging_lines(console: Console, text: Text, indent: int = 0, hang: int = 2) -> list[Text]:
    """`text` at `indent`, wrapped between words at the console's width with its continuation lines
    `hang` further in; into a pipe (soft wrap) one line, so that grep finds it whole."""
    if console.soft_wrap:
        return [Text(" " * indent) + text]
    pieces = text.wrap(console, max(console.width - indent - hang, 1))
    return [Text(" " * (indent + (hang if k else 0))) + piece for k, piece in enumerate(pieces)]


def _blocks(grid: Grid, console: Console) -> Group:
    """One record a block: its first field (bold) opens it, the others follow as "key: value" lines."""
    out: list[Text] = [Text(grid.title, style="bold")] if grid.title else []
    indent, heading = (2 if any(c.group for c in grid.columns) else 0), ""
    for row in grid.rows:
        group = _group_key(grid, row)
        if group and group != heading:
            heading = group
            out.append(Text(group, style="bold underline"))
        fields = [
            (col.name.replace("\n", " "), _text(cell))
            for col, cell in zip(grid.columns, row)
            if not col.group and _text(cell).plain.strip()
        ]
        if len(fields) > 1 and fields[0][0] == "#":  # a numbered row: "1. fix: paged KV cache"
            fields = [(f"{fields[0][1].plain}. {fields[1][0]}", fields[1][1])] + fields[2:]
        for n, (key, value) in enumerate(fields):
            line = Text.assemble((f"{key}: ", "bold" if n == 0 else "dim"), value)
            out += hanging_lines(console, line, indent + (2 if n else 0))
    if grid.caption:
        out.append(Text(grid.caption, style="dim"))
    return Group(*out)


def layout(grids: Grid | Sequence[Grid], console: Console) -> RenderableType:
    """The first grid that fits the console's width as a table; else the first (the fullest) as blocks."""
    options = [grids] if isinstance(grids, Grid) else list(grids)
    if not options:
        raise ValueError("layout needs at least one grid")
    tries = [
        g
        for grid in options
        for g in ([grid, dataclasses.replace(grid, dense=True)] if grid.box_optional and not grid.dense else [grid])
    ]
    for grid in tries:
        widths = _widths(grid, console.width)
        if widths is not None and _tallest_cell(grid, widths) <= MAX_CELL_LINES:
            return _table(grid, widths)
    return _blocks(options[0], console)


MAX_CELL_LINES = 10  # a cell wrapped into more lines than this reads better as a block of "key: value"


def _tallest_cell(grid: Grid, widths: list[int]) -> int:
    """The most lines any cell wraps into at these widths (word wrap, estimated from word lengths)."""
    tallest = 1
    for row in grid.rows:
        for cell, width in zip(row, widths):
            for line in _text(cell).plain.splitlines() or [""]:
                lines, used = 1, 0
                for word in line.split():
                    if used and used + 1 + len(word) > width:
                        lines, used = lines + 1, len(word)
                    else:
                        used += (1 if used else 0) + len(word)
                tallest = max(tallest, lines)
    return tallest


def print_grid(console: Console, grids: Grid | Sequence[Grid]) -> None:
    """Print through `console` at its width (into a pipe: $COLUMNS, else rich's 80)."""
    console.print(layout(grids, console))


def print_hanging(console: Console, text: Text, indent: int = 0, hang: int = 2) -> None:
    """A paragraph at `indent` whose wrapped lines sit `hang` further in (hanging_lines)."""
    for line in hanging_lines(console, text, indent, hang):
        console.print(line)

"""Tables that fit 80 columns with nothing cut: every table mptrain prints is one."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table
from rich.text import Text

READABLE = 16  # a verdict or finding gets this before names get theirs: "faster, accuracy"


@dataclass
class Fitted:
    """A table that fits the console's width (80 columns by design) with nothing cut.

    Number columns are as wide as their widest cell and never wrap; text columns (column 0 and
    `text_columns`: verdicts, findings) wrap between words and are never narrower than their
    widest word. A row's name (a run, a variant, a layer: one word a user copies into a
    command) leads column 0 when it fits there, else it has a line of its own above its row,
    where the whole width is its room. Rich's own layout would fold such a name, or, to keep
    it, shrink every column and cut numbers and headers. The widths are worked out when
    rendered, so a wider terminal keeps more names in their rows.

    `rows`: (name or None, cells); cells[0] is what column 0 shows under the name."""

    title: str | None
    headers: list[str]
    rows: list[tuple[str | None, list[str]]]
    text_columns: set[int] = field(default_factory=set)  # besides column 0
    gap: int = 2  # spaces between columns

    def __rich_console__(self, console, options):
        widths, gap = self._widths(options.max_width)
        if self.title:
            yield Text.from_markup(self.title, style="table.title")
        table = self._table(widths, gap, header=True)
        for name, cells in self.rows:
            first = cells[0]
            if name is not None and cell_len(name) > widths[0]:
                yield table  # the rows so far; the same widths continue under the name
                yield Text(name, overflow="fold")  # folded only if wider than the console
                table = self._table(widths, gap, header=False)
            elif name is not None:
                first = escape(name) + (f"\n{first}" if first else "")
            table.add_row(first, *cells[1:])
        yield table

    def _table(self, widths: list[int], gap: int, header: bool) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_header=header, show_edge=False, pad_edge=False,
                      collapse_padding=True, padding=(0, gap - 1))
        for index, (head, width) in enumerate(zip(self.headers, widths, strict=True)):
            if index == 0 or index in self.text_columns:
                table.add_column(head, width=width, overflow="fold")
            else:
                table.add_column(head, width=width, justify="right", no_wrap=True)
        return table

    def _widths(self, width: int) -> tuple[list[int], int]:
        """Every number its width and every word its own (the columns one space apart when two
        would fold a word: a compare's `mixed_float16+xla` lost its last letter to the gaps);
        then the verdicts READABLE columns, column 0 what its names need (those that can
        fit), the verdicts the rest. Returns the widths and the gap."""
        columns = [[head, *(Text.from_markup(cells[i]).plain for _, cells in self.rows)]
                   for i, head in enumerate(self.headers)]

        def longest(i: int) -> int:
            return max((cell_len(line) for cell in columns[i] for line in cell.splitlines()), default=0)

        def widest_word(i: int) -> int:
            return max((cell_len(word) for cell in columns[i] for word in cell.split()), default=0)

        text = sorted({0, *self.text_columns})
        widths = [widest_word(i) if i in text else longest(i) for i in range(len(columns))]
        gap = self.gap if width - self.gap * (len(columns) - 1) >= sum(widths) else 1
        spare = width - gap * (len(columns) - 1) - sum(widths)
        if spare < 0:  # a word wider than all the room left (a path in a finding): it folds
            widest = max(text, key=widths.__getitem__)
            widths[widest] = max(widths[widest] + spare, 1)
            spare = 0

        def grow(i: int, target: int) -> None:
            nonlocal spare
            step = max(0, min(spare, target - widths[i]))
            widths[i] += step
            spare -= step

        for i in text[1:]:
            grow(i, min(longest(i), READABLE))
        reach = widths[0] + spare
        grow(0, max([longest(0), *(cell_len(name) for name, _ in self.rows
                                   if name is not None and cell_len(name) <= reach)]))
        for i in text[1:]:
            grow(i, longest(i))
        return widths, gap

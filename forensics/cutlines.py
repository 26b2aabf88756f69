"""Lines a terminal cut short: what `systemctl status --no-pager` (without `-l`) and `journalctl --no-full` print on
a terminal. Each line too long for the terminal is cut to its width with `…` (U+2026) where text was left out:
at 90% of the message for a journal line, keeping its last words (`ellipsize_mem(..., 90)` in systemd's
src/shared/logs-show.c), at the end for a `CGroup:` process line.

What such a line said at the cut is not in the file: a rule may not match it, a value may be cut in half. They
are counted and the source's note says how to copy them whole. A cut line is as long as the terminal is wide,
and one paste comes from one terminal: the lines holding `…` that are at least MIN_WIDTH long are grouped by
length, and the largest group is taken for the cut ones (a message that holds `…` of its own is rarely exactly
that long).
"""

from __future__ import annotations

import re

import polars as pl

MARK = "\u2026"
MIN_WIDTH = 80   # terminals are at least this wide


def cut_lengths(lines: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Of the (`line`, `text`) batch, the lines that may have been cut by a terminal: length -> (how many, the first
    one's number); {} when none."""
    text = lines.get_column("text")
    hit = text.str.contains(MARK, literal=True)
    if not hit.any():
        return {}
    df = lines.filter(hit).with_columns(pl.col("text").str.len_chars().alias("n")).filter(pl.col("n") >= MIN_WIDTH)
    g = df.group_by("n").agg(pl.len().alias("k"), pl.col("line").min().alias("first"))
    return {int(n): (int(k), int(f)) for n, k, f in g.iter_rows()}


def merge(into: dict[int, tuple[int, int]], more: dict[int, tuple[int, int]]) -> None:
    """Add a batch's `cut_lengths` to a source's."""
    for n, (k, f) in more.items():
        k0, f0 = into.get(n, (0, f))
        into[n] = (k0 + k, min(f0, f))


def cut(lengths: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """(how many lines were cut, the first one's number): the largest group of one length (the longer on a tie)."""
    if not lengths:
        return None
    _, (k, f) = max(lengths.items(), key=lambda kv: (kv[1][0], kv[0]))
    return k, f


_NOTE = re.compile(r"^line (\d+): (\d+) line\(s\) cut to the terminal's width")


def read_note(text: str) -> tuple[int, int] | None:
    """(first line, how many) of a source note `note` wrote; None for any other note."""
    m = _NOTE.match(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def note(n: int, first: int) -> str:
    """The source's note on them."""
    return (f"line {first}: {n} line(s) cut to the terminal's width, with `…` where text was left out (systemctl "
            f"status --no-pager without -l, journalctl --no-full, on a terminal): what they said there is not in the "
            f"file and rules may miss them; copy them whole with `systemctl status UNIT -l --no-pager` or "
            f"`journalctl ... --no-pager`, redirected to a file")

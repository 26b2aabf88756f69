"""Terminal escape sequences in log lines: colours and cursor moves, taken out before parsing.

`dmesg --color=always`, `systemctl status` under `script`, `tmux capture-pane -e`, uvicorn and other Python
loggers that colour their level when they think they write to a terminal: a line copied from any of them holds
ECMA-48 sequences (`ESC [ 32 m`) around its stamp or level, which no format's pattern expects. They are taken out
of line-format text (never out of a structured format's, whose values are kept as written) and counted.
"""

from __future__ import annotations

import re

import polars as pl

ESC = "\x1b"
# CSI (`ESC [` parameters, intermediates, a final byte), OSC (`ESC ]` ... BEL or `ESC \`), and the two-byte
# escapes (`ESC` and one byte from `@` to `_`, as `ESC (B` is not: a charset designation, three bytes)
SEQUENCE = (r"\x1b\[[0-?]*[ -/]*[@-~]"
            r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
            r"|\x1b[()*+][0-~]"
            r"|\x1b[@-Z\\-_]")


def strip_lines(lines: pl.DataFrame, col: str = "text") -> tuple[pl.DataFrame, int]:
    """`lines` with the escape sequences taken out of `col`, and how many lines held one (0: `lines` as given)."""
    text = lines.get_column(col)
    held = text.str.contains(ESC, literal=True)
    n = int(held.sum())
    if n == 0:
        return lines, 0
    return lines.with_columns(pl.when(held).then(pl.col(col).str.replace_all(SEQUENCE, "")).otherwise(pl.col(col))
                              .alias(col)), n


def strip_series(text: pl.Series) -> pl.Series:
    """The same for a Series (a detection sample)."""
    return strip_lines(text.to_frame("text"))[0].get_column("text").alias(text.name)


_SEQUENCE_RX = re.compile(SEQUENCE)


def strip_text(text: str) -> str:
    """The same for one line (a quoted excerpt, as its record was read)."""
    return _SEQUENCE_RX.sub("", text) if ESC in text else text

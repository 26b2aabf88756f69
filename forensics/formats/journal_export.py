"""Format `journal-export`: journalctl -o export, the journal's binary-safe serialisation.

An entry is one `NAME=value` line per field, the metadata first (`__CURSOR`, `__REALTIME_TIMESTAMP`,
`__MONOTONIC_TIMESTAMP`, `_BOOT_ID`), then a blank line. A value that is not printable UTF-8 or holds a newline
(a message with ANSI colours, a multi-line message) is written as `NAME` alone on its line, then its length as a
64-bit little-endian integer, the raw bytes and a newline (systemd's docs/JOURNAL_EXPORT_FORMATS.md,
`output_export()` in src/shared/logs-show.c). The fields become a record as journalctl's JSON does
(`journal_json.records_from_fields`): the time is `__REALTIME_TIMESTAMP`, exact.

Read as text, a binary value's length is 8 characters (its zero bytes read as NUL or, from a file, as U+FFFD) and
its bytes may span lines: the value is every line from the one after its name up to the next field or the blank
line that ends the entry, the length taken off. A length whose low byte is a newline shows as a blank line right
after the name, which is read as part of the value, not as the entry's end. A value whose own bytes hold a blank
line or a `NAME=value` line cannot be told from the entry's structure: the entry ends or gains a field there,
and the lines after it are kept as `text` records (never dropped). Lines that belong to no entry (a shell prompt
before the first, text after a value) are `text` records of their own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import polars as pl

from .base import Continuation, PostContext, Stamp, StructuredFormat, hold_back, no_records, with_text_records
from .journal_json import RECORD_FIELDS, records_from_fields

FIELD = r"^(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$"
BARE = r"^[A-Z_][A-Z0-9_]*$"
_ZERO = ("\x00", "\ufffd")  # a zero byte as read: itself, or U+FFFD from a file (sources replace NUL bytes)


def _length(text: str) -> int | None:
    """A binary value's length from its first 8 characters, when they show it: a low byte that is ASCII, the next
    ASCII or zero, the other six zero (a value under 32 KiB); None otherwise."""
    head = text[:8]
    if len(head) < 8 or head[0] == "\ufffd" or any(c not in _ZERO for c in head[2:]):
        return None
    if ord(head[0]) >= 0x80 or (head[1] not in _ZERO and ord(head[1]) >= 0x80):
        return None
    return ord(head[0]) + 256 * (0 if head[1] in _ZERO else ord(head[1]))


def _bytes(line: str) -> int:
    """The bytes a line read as text stood for (a U+FFFD stood for one byte, a NUL or one not UTF-8)."""
    return len(line.encode("utf-8", "surrogatepass")) - 2 * line.count("\ufffd")


_FIELD_RX, _BARE_RX = re.compile(FIELD), re.compile(BARE)


def value_lines(texts: Sequence[str | None], bare: Sequence[int]) -> list[int]:
    """The lines after each binary field's first value line that its length shows are still its bytes although
    they look like the entry's structure (a blank line, a `NAME=value` line): while the bytes read so far are
    fewer than its length, less one per line joined (a reader may have taken the CR of a CRLF off)."""
    out: list[int] = []
    n = len(texts)
    for i in bare:
        if i + 1 >= n:
            continue
        first = texts[i + 1] or ""
        size = _length(first + ("\n" + (texts[i + 2] or "") if i + 2 < n else "")) if len(first) < 8 else _length(first)
        if size is None:
            continue
        got, joins, j = _bytes(first), 0, i + 2
        while j < n and got < 8 + size - joins:
            t = texts[j] or ""
            if t == "" or _FIELD_RX.match(t) or _BARE_RX.match(t):
                out.append(j)
            got += 1 + _bytes(t)
            joins += 1
            j += 1
    return out


def binary_value(text: str) -> str:
    """A binary field's value from the text after its name: its 8 length bytes taken off (each read as one
    character, or two as one when they happen to form a UTF-8 character)."""
    used = i = 0
    while i < len(text) and used < 8:
        c = text[i]
        used += 1 if c in _ZERO or ord(c) < 0x80 else len(c.encode("utf-8", "surrogatepass"))
        i += 1
    return text[i:]


class JournalExport(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        head = lines.head(400)
        nonblank = head.filter(head.str.strip_chars() != "")
        if nonblank.len() == 0 or not head.str.contains(r"^__REALTIME_TIMESTAMP=\d+$").any():
            return 0.0
        return float((nonblank.str.contains(FIELD) | nonblank.str.contains(BARE)).sum()) / nonblank.len()

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Whole entries become records; the lines after the batch's last entry end wait for the next batch."""
        text = pl.col("text")
        bare = text.str.contains(BARE).fill_null(False)
        forced = bare.shift(1).fill_null(False)     # the first line of a binary value, whatever it looks like
        at = lines.select(bare & ~forced).to_series().arg_true()
        more = value_lines(lines.get_column("text").to_list(), at.to_list()) if at.len() else []
        if more:  # lines its length shows are a value's bytes
            forced = forced | pl.int_range(pl.len()).is_in(more)
        marked = lines.with_columns(
            (text.str.contains(FIELD).fill_null(False) & ~forced).alias("_f"),
            (bare & ~forced).alias("_b"),
            ((text == "") & ~forced).alias("_end"))
        marked, carry = hold_back(marked, lines, "_end", final, after=True)
        if marked is None or marked.height == 0:
            return no_records(), carry
        # an entry: the lines up to and with the blank line that ends it; a field: its line and its value's lines
        marked = marked.with_columns(pl.col("_end").shift(1).fill_null(False).cum_sum().alias("_seg"),
                                     (pl.col("_f") | pl.col("_b")).cum_sum().alias("_fid"))
        # a value line: in a binary field's group, in the same entry as the field's name
        binary = pl.col("_b").first().over("_fid") & (pl.col("_seg").first().over("_fid") == pl.col("_seg"))
        marked = marked.with_columns(
            pl.when(pl.col("_f") | pl.col("_b")).then(pl.lit("field"))
            .when((pl.col("_fid") > 0) & binary & ~pl.col("_end")).then(pl.lit("value"))
            .when(pl.col("_end")).then(pl.lit("end"))
            .otherwise(pl.lit("stray")).alias("_role"))
        # a group's lines must all be in one entry: a field's value does not run on past the entry's end
        entries = marked.filter(pl.col("_role") != "stray")
        has_field = (pl.col("_role") == "field").any().over("_seg")
        entries = entries.filter(has_field)
        others = marked.filter((pl.col("_role") == "stray")
                               | ~pl.col("line").is_in(entries.get_column("line").implode()))
        return with_text_records(self._entries(entries) if entries.height else None, others), carry

    def _entries(self, rows: pl.DataFrame) -> pl.DataFrame:
        # a text field is its own line; a binary one its name's line and its value's, decoded one by one (few)
        named = rows.filter(pl.col("_f")).select("_seg", "_fid", pl.col("text").str.extract(FIELD, 1).alias("name"),
                                                 pl.col("text").str.extract(FIELD, 2).alias("value"))
        binary = rows.filter((pl.col("_role") == "value") | pl.col("_b"))
        if binary.height:
            groups = binary.group_by("_fid", maintain_order=True).agg(
                pl.col("_seg").first(), pl.col("text").first().alias("name"),
                pl.col("text").slice(1).str.join("\n").alias("_raw"))
            values = pl.Series("value", [binary_value(t) for t in groups.get_column("_raw").to_list()], dtype=pl.String)
            named = pl.concat([named, groups.select("_seg", "_fid", "name").with_columns(values)]).sort("_fid")
        wanted = named.filter(pl.col("name").is_in(list(RECORD_FIELDS)))
        # a field given twice (journalctl's JSON makes it an array) keeps its first value; MESSAGE keeps them all
        is_msg = pl.col("name") == "MESSAGE"
        values = wanted.group_by("_seg", maintain_order=True).agg(
            pl.col("value").filter(is_msg).str.join("\n").alias("MESSAGE"), is_msg.any().alias("_has_msg"),
            *(pl.col("value").filter(pl.col("name") == n).first().alias(n) for n in RECORD_FIELDS if n != "MESSAGE"))
        span = rows.group_by("_seg").agg(pl.col("line").min().alias("line"), pl.col("line").max().alias("line_end"))
        df = (span.join(values, on="_seg", how="left").sort("line")
              .with_columns(pl.when(pl.col("_has_msg").fill_null(False)).then(pl.col("MESSAGE"))
                            .otherwise(pl.lit("<entry without a MESSAGE field>")).alias("MESSAGE")))
        return records_from_fields(df).with_columns(pl.lit(self.name).alias("format"))


FORMAT = JournalExport(
    name="journal-export",
    description="journalctl -o export: `NAME=value` lines, a blank line after each entry; a binary value as `NAME`, "
                "a 64-bit length and the raw bytes",
    pattern=r"^__CURSOR=",
    stamp=Stamp.EPOCH,
    continuation=Continuation.NONE,
    priority=3,
    example="__CURSOR=s=e1b7c3a94d2f4a6b8c0d9e8f7a6b5c4d;i=2f1b3;b=8c1f3a0b6d2e4f5a9b7c0d1e2f3a4b5c;m=1e4d1a2b3;"
            "t=635fb6aa0c3c4;x=9f1e2d3c4b5a6978\n__REALTIME_TIMESTAMP=1748204239419012\n_HOSTNAME=gpu-node-1\n"
            "SYSLOG_IDENTIFIER=systemd\nMESSAGE=sglang.service: Failed with result 'signal'.\n",
)

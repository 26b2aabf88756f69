"""The host a source that prints none names at each boot: a raw dmesg holds systemd's
`systemd[1]: Hostname set to <gpu-a07>.` (older systemd: `Set hostname to <...>.`) a few seconds into each boot.

Batches pass through `BootHosts.observe` (after the clock has labelled their boots); once the source is read,
`host_expr` gives its records and events with no host the host their boot names, by line: a boot runs from its
first line to the next boot's. A source given `--host`, or whose lines print a host, never reaches this (its
records have one). Only the hostless records of a source read as dmesg are looked at, so a journal or an SGLang log
costs nothing here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import polars as pl

HOSTNAME = r"^systemd\[1\]: (?:Hostname set to|Set hostname to) <([^<>\s]+)>\.?\s*$"
_LITERAL = "ostname"   # what every such line holds (a cheap test before the pattern)
# the names a box boots with before its own is set (a cloud image's, given later by cloud-init or DHCP): no host
GENERIC = frozenset({"localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6", "(none)"})


@dataclass
class BootHosts:
    """Per boot (its label, `boot_id`; "" for records without one): its first line, its records, and the host
    it names with the line that names it (the first such line of the boot).

    `of(formats)` is the one for a source read in those formats."""

    enabled: bool = True                    # a source read as dmesg (its formats); others are not looked at
    first: dict[str, int] = field(default_factory=dict)
    records: Counter = field(default_factory=Counter)
    named: dict[str, tuple[str, int]] = field(default_factory=dict)

    def observe(self, recs: pl.DataFrame) -> None:
        """Note a batch's hostless records: where each boot starts, and the host lines among them."""
        if not self.enabled or recs.height == 0 or "host" not in recs.columns or recs["host"].null_count() == 0:
            return
        hostless, boot = pl.col("host").is_null(), pl.col("boot_id").fill_null("")
        for b, first, n in recs.lazy().filter(hostless).group_by(boot, maintain_order=True).agg(
                pl.col("line").min(), pl.len()).collect().iter_rows():
            self.first.setdefault(b, first)
            self.records[b] += n
        # only the few lines that hold the literal are copied out of the batch
        hits = recs.lazy().filter(hostless & pl.col("message").str.contains(_LITERAL, literal=True)).select(
            boot, "line", pl.col("message").str.extract(HOSTNAME, 1).alias("h")).filter(
            pl.col("h").is_not_null()).collect()
        for b, line, h in hits.select("boot_id", "line", "h").iter_rows():
            if h.lower() not in GENERIC:
                self.named.setdefault(b, (h, line))

    def _ranges(self) -> list[tuple[int, str | None]]:
        """(first line, host or None) of each boot, in line order."""
        return sorted((line, self.named.get(b, (None, 0))[0]) for b, line in self.first.items())

    def host_expr(self) -> pl.Expr | None:
        """The `host` column with each hostless line given the host its boot names (None: no boot names one)."""
        if not self.named:
            return None
        ranges = self._ranges()
        # a chain of line ranges, elementwise, so that polars' streaming sink keeps streaming (a lookup into a
        # literal series made it take the whole file in memory: a 4 GiB corpus's ingest peaked at 1 GiB)
        chain = None
        for i, (start, host) in enumerate(ranges):
            if host is None:
                continue
            end = ranges[i + 1][0] if i + 1 < len(ranges) else None
            cond = pl.col("line") >= start if end is None else pl.col("line").is_between(start, end, closed="left")
            chain = pl.when(cond).then(pl.lit(host)) if chain is None else chain.when(cond).then(pl.lit(host))
        assert chain is not None   # self.named is not empty
        return pl.coalesce(pl.col("host"), chain.otherwise(pl.lit(None, dtype=pl.String))).alias("host")

    def counts(self) -> Counter:
        """Records per host given (for the source's entry: its most common host)."""
        out: Counter = Counter()
        for b, n in self.records.items():
            if b in self.named:
                out[self.named[b][0]] += n
        return out

    def note(self) -> str:
        """How the hosts were obtained, for the source's notes ("" when none was)."""
        if not self.named:
            return ""
        said = sorted((line, h) for h, line in self.named.values())
        shown = ", ".join(f"{h} (line {line})" for line, h in said[:6]) + (", ..." if len(said) > 6 else "")
        left = sum(n for b, n in self.records.items() if b not in self.named)
        tail = f"; {left} record(s) of boots that name none keep no host" if left else ""
        return (f"host from systemd's `Hostname set to <...>` line of each boot: {shown}" + tail)

    @classmethod
    def of(cls, formats: tuple[str, ...]) -> BootHosts:
        return cls(enabled=any(f.startswith("dmesg") for f in formats))

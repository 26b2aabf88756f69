"""Shell-style name globs (`*`, `?`) as regexes and as polars tests: the rule packs' `applies` and the `--host`,
`--unit` and `--rule` filters of the queries read them the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence

import polars as pl


def glob_rx(globs: Sequence[str]) -> str:
    """One anchored regex matching any of `globs` (every other character literal)."""
    alts = ["".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in g) for g in globs]
    return "^(?:" + "|".join(alts) + ")$"


def globs_expr(col: str | pl.Expr, globs: Sequence[str]) -> pl.Expr:
    """True where `col` (a column's name, or an expression) matches one of `globs`, null where it is null: the
    plain names as one `is_in` (which the Parquet statistics can answer), the globs as one regex."""
    plain = [g for g in globs if not any(c in g for c in "*?")]
    wild = [g for g in globs if any(c in g for c in "*?")]
    c = pl.col(col) if isinstance(col, str) else col
    tests = [*([c.is_in(plain)] if plain else []), *([c.str.contains(glob_rx(wild))] if wild else [])]
    return tests[0] if len(tests) == 1 else pl.any_horizontal(tests)

"""Matching: rule packs over stored records -> events, vectorised with polars.

    events = match_records(records, load_rules())        # RECORD_SCHEMA in, EVENT_SCHEMA out

1. Prefilter: one pass (a regex alternation of literals, `_any_literal`) over every message for the literals
   of all rules and context patterns at once; `str.extract_many` then tells which literals (so which rules) each
   candidate holds. Over a stream (`Matcher`, as ingest runs it) each batch is prefiltered as it comes and
   steps 2-4 run over the candidates of many batches at once.
2. Each rule's full pattern runs (`str.extract_groups`, Rust regex) only on its candidates that pass its
   `applies` and `exclude`; rules needing look-around run with the `regex` module and a timeout. A rule whose
   events polars builds alone (`vectorisable`) is one query, its expressions built once: a flush's fixed cost is
   no longer ten small queries a rule.
3. Context patterns (multi-record events such as a kernel OOM report) are looked up for the few anchors
   only: first inside the anchor record, then with an as-of join on line number within the same source
   and host.
4. Casts (forensics.casts), derived fields and lookups run in Python on the matched rows only; `fields` is a JSON
   object with sorted keys.

An event's `line`..`line_end` are its record's, widened to the context records merged into it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import polars as pl
import regex

from .casts import SIGNALS, apply_cast
from .globs import glob_rx, globs_expr
from .literals import search_groups
from .asides import ASIDE, TAIL, aside_names
from .rulemodel import Context, Direction, Engine, Rule, RuleSet, render_title, size_fields, wrap
from .regexbudget import REGEX_TIMEOUT, RegexBudget
from .schema import EVENT_SCHEMA, RECORD_SCHEMA, detached, empty_events
from .yamlread import Location

ROW = "__row"
_REC_COLS = ("ts", "ts_source", "host", "ident", "pid", "unit", "rank", "message", "source_id", "path", "line",
             "line_end", "format", "mono", "boot_id")


# ----------------------------------------------------------------------------------------------------------
# the engine


def globs_admit(globs: Sequence[str], value: object) -> bool:
    """True when `value` matches one of the `applies` globs (`*`, `?`), as `applies_expr` tests a column."""
    return regex.match(glob_rx(globs), str(value)) is not None


def applies_expr(rule: Rule) -> pl.Expr | None:
    """True where the rule may apply to a record (a null column never excludes)."""
    exprs = []
    for col, globs in rule.applies.columns():
        exprs.append(pl.col(col).is_null() | globs_expr(col, globs))
    if not exprs:
        return None
    return pl.all_horizontal(exprs)


@dataclass(frozen=True)
class _Key:
    rule: int
    ctx: int = -1        # -1: the rule's own pattern; else the index of its context pattern


def _literal_table(rules: RuleSet, ignore_case: bool) -> pl.DataFrame:
    lits, keys_r, keys_c = [], [], []
    for i, r in enumerate(rules.rules):
        if r.ignore_case == ignore_case:
            for lit in r.literals:
                lits.append(lit)
                keys_r.append(i)
                keys_c.append(-1)
        for j, c in enumerate(r.context):
            if c.ignore_case == ignore_case:
                for lit in c.literals:
                    lits.append(lit)
                    keys_r.append(i)
                    keys_c.append(j)
    return pl.DataFrame({"_lit": lits, "_kr": keys_r, "_kc": keys_c},
                        schema={"_lit": pl.String, "_kr": pl.Int32, "_kc": pl.Int32})


def _literal_tables(rules: RuleSet) -> pl.DataFrame:
    """literal -> (rule index, context index) for every literal of the rule set."""
    return pl.concat([_literal_table(rules, False), _literal_table(rules, True)])


def _prefilter(recs: pl.DataFrame, rules: RuleSet) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidate rows: those holding any literal of a rule that may apply; their (ROW, rule, context) pairs)."""
    cand = _candidate_rows(recs, _prefilter_expr(rules, _only(recs, "ident"), _only(recs, "format")))
    return cand, _pairs(cand, rules)


def _any_literal(literals: Sequence[str], ignore_case: bool) -> pl.Expr:
    """True where the message holds one of `literals` (ASCII case ignored or not): a Rust regex alternation of
    the escaped literals for each of their `search_groups`, the groups or-ed. polars keeps compiled regexes across
    calls, while `str.contains_any` builds its Aho-Corasick automaton again on every call (1.5-2.5 ms for ~100
    literals, paid twice per batch) and searches no faster. `(?i)` folds Unicode case too, a superset of the
    ASCII folding the rules ask for: a prefilter may pass more, never less."""
    msg = pl.col("message")
    conds = []
    for group in search_groups(tuple(literals)):
        alternation = "|".join(pl.escape_regex(x) for x in group)
        conds.append(msg.str.contains("(?i)" + alternation if ignore_case else alternation))
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


def _prefilter_expr(rules: RuleSet, ident: str | None = None, fmt: str | None = None) -> pl.Expr | None:
    """True where a message holds a literal of some rule (None: no rule has one): one pass over every message
    for each search group of the case-sensitive and of the case-insensitive literals. With `ident` (`fmt`), for
    records that all have that identifier (format): the literals of the rules that may apply to them, and of every
    context pattern."""
    only = None if ident is None and fmt is None else _admits(ident, fmt)
    conds = [_any_literal(lits, ic) for ic in (False, True) if (lits := rules.literals(ic, only))]
    return (pl.any_horizontal(conds) if len(conds) > 1 else conds[0]) if conds else None


def _admits(ident: str | None, fmt: str | None) -> Callable[[Rule], bool]:
    """Whether a rule may apply to a record with this identifier and format (its `applies.idents` and
    `applies.formats`, if any, admit them; None: either)."""
    return lambda r: ((ident is None or not r.applies.idents or globs_admit(r.applies.idents, ident))
                      and (fmt is None or not r.applies.formats or globs_admit(r.applies.formats, fmt)))


def _only(records: pl.DataFrame, col: str) -> str | None:
    """The value every record of the batch has in `col`, if they all have the same one (a dmesg or SGLang file's
    batches: identifier `kernel`, `sglang`; a journal's: its format), else None. A scan for the least and the
    greatest, no hashing."""
    if col not in records.columns or records.height == 0:
        return None
    values = records.get_column(col)
    if values.null_count():
        return None
    lo, hi = values.min(), values.max()
    return lo if lo == hi else None


def _candidate_rows(recs: pl.DataFrame, cond: pl.Expr | None) -> pl.DataFrame:
    """The rows `cond` (a `_prefilter_expr`) passes."""
    return recs.clear() if cond is None else recs.filter(cond)


_PAIRS_ROWS = 16_384   # candidates whose literals are listed at a time (the lists of a whole flush's took 50 MiB)
POS = "__pos"          # a pair's candidate: its position in the candidate frame the pairs were made from


def _pairs(cand: pl.DataFrame, rules: RuleSet, table: pl.DataFrame | None = None) -> pl.DataFrame:
    """(ROW, POS, rule, context) for every literal each candidate holds: which rules (and context patterns) to
    try, and on which rows of `cand` (POS: its rows are then gathered by position, with no search for them)."""
    if cand.height == 0:
        return _NO_PAIRS
    table = _literal_tables(rules) if table is None else table
    parts = [_pairs_of(cand.slice(i, _PAIRS_ROWS), i, rules, table) for i in range(0, cand.height, _PAIRS_ROWS)]
    pairs = pl.concat(parts) if len(parts) > 1 else parts[0]
    return pairs.select(cand.get_column(ROW).gather(pairs.get_column(POS)).alias(ROW), POS, "_kr", "_kc")


def _pairs_of(cand: pl.DataFrame, offset: int, rules: RuleSet, table: pl.DataFrame) -> pl.DataFrame:
    """(POS, rule, context) of a slice of the candidates that starts at position `offset`."""
    msg = pl.col("message")
    at = (pl.int_range(pl.len(), dtype=pl.UInt32) + pl.lit(offset, dtype=pl.UInt32)).alias(POS)
    cs, ci = rules.literals(False), rules.literals(True)
    hits = []
    if cs:
        hits.append(cand.select(at, msg.str.extract_many(list(cs), overlapping=True).alias("_lit")))
    if ci:
        hits.append(cand.select(at, msg.str.extract_many(list(ci), overlapping=True, ascii_case_insensitive=True)
                                .list.eval(pl.element().str.to_lowercase()).alias("_lit")))
    found = pl.concat(hits).explode("_lit").drop_nulls("_lit").unique()
    return found.join(table, on="_lit").select(POS, "_kr", "_kc").unique()


_NO_PAIRS = pl.DataFrame(schema={ROW: pl.UInt32, POS: pl.UInt32, "_kr": pl.Int32, "_kc": pl.Int32})


def _keys(pairs: pl.DataFrame) -> dict[_Key, pl.Series]:
    """For each (rule, context) key, the positions of its candidates (POS), in ROW order."""
    ordered = pairs.sort("_kr", "_kc", ROW)
    runs = ordered.select(pl.struct("_kr", "_kc").rle()).unnest("_kr").unnest("value")  # len, _kr, _kc per run
    at = ordered.get_column(POS)
    out: dict[_Key, pl.Series] = {}
    start = 0
    for n, kr, kc in runs.iter_rows():   # slices of one sorted column: no frame per group
        out[_Key(kr, kc)] = at.slice(start, n)
        start += n
    return out


def _extract(frame: pl.DataFrame, pattern: str, engine: Engine, groups: Sequence[str],
             budget: RegexBudget | None = None, rule: Rule | None = None) -> pl.DataFrame:
    """ROW + one String column per named group, for the rows of `frame` the pattern matches. The `regex`
    engine runs within the rule's time `budget` (a fresh one when None)."""
    if frame.height == 0:
        return pl.DataFrame(schema={ROW: pl.UInt32, **{g: pl.String for g in groups}})
    if engine is Engine.POLARS:
        return _extract_lazy(frame.lazy(), pattern, groups).collect()
    assert rule is not None, "the regex engine runs a rule's own pattern (its time is charged to the rule)"
    return _extract_regex(frame, pattern, groups, budget or RegexBudget(), rule)


def _extract_regex(frame: pl.DataFrame, pattern: str, groups: Sequence[str], budget: RegexBudget,
                   rule: Rule) -> pl.DataFrame:
    """`_extract` with the `regex` module: per message, within the rule's timeout and budget for the source."""
    rx = _compiled(pattern)
    rows: list[int] = []
    vals: dict[str, list[str | None]] = {g: [] for g in groups}
    for row, msg, path, line in frame.select(ROW, "message", "path", "line").iter_rows():
        if msg is None:
            continue
        m = budget.search(rule, rx, msg, path, line)
        if m is None:
            continue
        rows.append(row)
        for g in groups:
            vals[g].append(m.group(g))
    return pl.DataFrame({ROW: rows, **vals}, schema={ROW: pl.UInt32, **{g: pl.String for g in groups}})


@lru_cache(maxsize=4096)
def _groups_expr(pattern: str) -> pl.Expr:
    """`__g`: the struct of the pattern's groups in the message, `_m` its whole match (null: no match). Built once
    per pattern: building it compiles the pattern (to learn its groups), 1-3 ms for the long ones, more than
    running it on a flush's few candidates of a rule."""
    return pl.col("message").str.extract_groups(wrap(pattern)).alias("__g")


_RX_CACHE: dict[str, regex.Pattern] = {}


def _compiled(pattern: str) -> regex.Pattern:
    rx = _RX_CACHE.get(pattern)
    if rx is None:
        rx = _RX_CACHE[pattern] = regex.compile(pattern)
    return rx


@dataclass
class _Found:
    """A rule's match on one record while an event is assembled (internal, mutable)."""

    row: int
    groups: dict[str, Any]
    line: int
    line_end: int


def _positions(cand: pl.DataFrame, rows: pl.Series) -> pl.Series:
    """The positions in `cand` (sorted by ROW, as every candidate frame is) of these ROW ids: a binary search,
    cheaper than a filter or a join over all the candidates."""
    return cand.get_column(ROW).search_sorted(rows, side="left")


def _rule_matches(rule: Rule, at: pl.Series | None, cand: pl.DataFrame,
                  budget: RegexBudget) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidate records of the rule that pass applies/exclude, their matches), from its candidates' positions
    in `cand` (`_keys`)."""
    if at is None or at.len() == 0:
        return cand.clear(), pl.DataFrame()
    sub = cand[at]
    ap = applies_expr(rule)
    if ap is not None:
        sub = sub.filter(ap)
    if rule.exclude:
        sub = sub.filter(~pl.col("message").str.contains(rule.exclude).fill_null(False))
    return sub, _extract(sub, rule.pattern, rule.engine, rule.groups, budget, rule)


# what a vectorised rule's events take from their records besides the fields (titles, the event's unit and pid);
# the rest of an event's columns are gathered once for all of them (`_with_records`)
_EVENT_OWN_COLS = ("unit", "pid", "host", "rank")


def _narrow_all(rules: RuleSet) -> list[str]:
    """The candidate columns the vectorised rules read: the message, the columns their `applies` test, and
    `_EVENT_OWN_COLS`."""
    return list(dict.fromkeys([ROW, POS, "message", *(col for r in rules.rules for col, _ in r.applies.columns()),
                               *_EVENT_OWN_COLS]))


_EVENT_RECORD_COLS = ("ts", "ts_source", "host", "message", "source_id", "path", "line", "line_end", "format")


def _context_fields(rule: Rule, anchors: pl.DataFrame, cand: pl.DataFrame, keys: dict[_Key, pl.Series],
                    rule_index: int, found: dict[int, _Found]) -> None:
    """Merge each context pattern's groups (and lines) into the anchors' matches, in place. Every context's
    lookups are one lazy query each, all collected at once (their eager steps cost 10 queries a context)."""
    queries: list[pl.LazyFrame] = []
    for j, c in enumerate(rule.context):
        at = keys.get(_Key(rule_index, j))
        queries.extend(_context_queries(c, anchors, None if at is None else cand[at]))
    got = iter(pl.collect_all(queries))
    for c in rule.context:
        groups = list(c.groups)
        inside = next(got)  # 1. inside the anchor record itself (a multi-line record holding the whole report)
        for row_d in inside.iter_rows(named=True):
            row = row_d.pop(ROW)
            _merge(found[row], row_d, c)
        # 2. the nearest matching record before / after, same source and host (and `same` columns), for the
        # anchors that do not hold the context themselves
        for d in next(got).iter_rows(named=True):
            f = found[d[ROW]]
            _merge(f, {g: d[f"__c_{g}"] for g in groups}, c)
            f.line, f.line_end = min(f.line, d["__cline"]), max(f.line_end, d["__cend"])


def _context_queries(c: Context, anchors: pl.DataFrame,
                     pool: pl.DataFrame | None) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(the context's groups inside each anchor record: ROW + groups; the nearest record of `pool` (the context's
    candidates) before / after each other anchor within the context's lines (and seconds): ROW, `__cline`,
    `__cend` and `__c_<group>`)."""
    groups = list(c.groups)
    inside = _extract_lazy(anchors.lazy(), c.pattern, groups)
    out_cols = [ROW, "__cline", "__cend", *[f"__c_{g}" for g in groups]]
    if pool is None or pool.height == 0:
        return inside, pl.LazyFrame(schema={ROW: pl.UInt32, "__cline": pl.Int64, "__cend": pl.Int64,
                                            **{f"__c_{g}": pl.String for g in groups}})
    hits = _extract_lazy(pool.lazy(), c.pattern, groups)
    by = ["path", "__host", "__boot", *[s for s in c.same if s != "boot_id"]]
    prep = [pl.col("host").fill_null("").alias("__host"), pl.col("boot_id").fill_null("").alias("__boot")]
    prep += [pl.col(s).fill_null(-1 if s == "pid" else "").alias(s) for s in c.same if s != "boot_id"]
    right = (pool.lazy().join(hits.rename({g: f"__c_{g}" for g in groups}), on=ROW)
             .with_columns(prep)
             .select(*by, pl.col(ROW).alias("__crow"), pl.col("line").alias("__cline"),
                     pl.col("line_end").alias("__cend"), pl.col("ts").alias("__cts"),
                     pl.col("mono").alias("__cmono"), *[f"__c_{g}" for g in groups]))
    left = anchors.lazy().join(inside.select(ROW), on=ROW, how="anti").with_columns(prep).select(
        ROW, *by, "line", "line_end", "ts", "mono")
    if c.direction is Direction.BEFORE:
        left = left.with_columns((pl.col("line") - 1).alias("__key")).sort("__key")
        right = right.with_columns(pl.col("__cend").alias("__key")).sort("__key")
        strategy = "backward"
    else:
        left = left.with_columns((pl.col("line_end") + 1).alias("__key")).sort("__key")
        right = right.with_columns(pl.col("__cline").alias("__key")).sort("__key")
        strategy = "forward"
    joined = left.join_asof(right, on="__key", by=by, strategy=strategy, tolerance=c.lines,
                            check_sortedness=False).filter(pl.col("__crow").is_not_null())
    if c.seconds is not None:
        dt_ts = (pl.col("__cts") - pl.col("ts")).dt.total_microseconds().abs() / 1e6
        dt_mono = (pl.col("__cmono") - pl.col("mono")).abs()
        joined = joined.filter(
            pl.when(pl.col("ts").is_not_null() & pl.col("__cts").is_not_null()).then(dt_ts <= c.seconds)
            .when(pl.col("mono").is_not_null() & pl.col("__cmono").is_not_null()).then(dt_mono <= c.seconds)
            .otherwise(True))
    return inside, joined.select(out_cols)


def _extract_lazy(frame: pl.LazyFrame, pattern: str, groups: Sequence[str]) -> pl.LazyFrame:
    """`_extract` with the polars engine, as a lazy query."""
    return (frame.select(ROW, _groups_expr(pattern)).unnest("__g").filter(pl.col("_m").is_not_null())
            .select(ROW, *[pl.col(g) for g in groups]))


def _merge(f: _Found, groups: Mapping[str, Any], c: Context) -> None:
    casts = dict(c.casts)
    for k, v in groups.items():
        if v is None or k == "_m" or f.groups.get(k) is not None:
            continue
        f.groups[k] = apply_cast(casts[k], v) if k in casts else v


def _finish_fields(rule: Rule, groups: Mapping[str, Any], rules: RuleSet) -> dict[str, Any]:
    """Casts, then derived fields (which may read private `_name` groups), then drop private names."""
    fields = {k: v for k, v in groups.items() if v is not None and k != "_m"}
    for name, cast in rule.casts:
        if name in fields and name in rule.groups:
            v = apply_cast(cast, fields[name])
            if v is None:
                del fields[name]
            else:
                fields[name] = v
    for d in rule.derive:
        if fields.get(d.field) is not None:
            continue
        v = next((fields[s] for s in d.sources if fields.get(s) is not None), None) if d.sources else d.value
        if d.sources and d.value is not None and v is not None:
            v = d.value
        if v is None:
            continue
        if d.lookup:
            table = rules.lookup(d.lookup)
            v = table.get(v) if table else None
        if v is not None and d.cast:
            v = apply_cast(d.cast, v)
        if v is not None:
            fields[d.field] = v
    return {k: v for k, v in fields.items() if not k.startswith("_")}


def _as_pid(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _fields_json(fields: Mapping[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


# -- the vectorised path: rules whose fields need no Python (no context, no derive, simple casts)

_VECTOR_CASTS = ("int", "float", "str", "lower", "signal", "unquote")
_SIGNAL_NAMES = {str(k): v for k, v in SIGNALS.items()}


def vectorisable(rule: Rule) -> bool:
    """A rule whose events polars can build alone: no context, no derived fields, simple casts, and a title
    without a size spec (`{x:kB}`, printed by `render` in Python)."""
    return (rule.engine is Engine.POLARS and not rule.context and not rule.derive
            and all(c in _VECTOR_CASTS for _, c in rule.casts) and not size_fields(rule.title or ""))


def _cast_expr(col: pl.Expr, cast: str | None) -> pl.Expr:
    if cast == "int":
        return col.str.strip_chars().cast(pl.Int64, strict=False)
    if cast == "float":
        return col.str.strip_chars().cast(pl.Float64, strict=False)
    if cast == "lower":
        return col.str.to_lowercase()
    if cast == "unquote":                      # `cast_unquote`
        return col.str.replace_all(r'\\(["\\])', "$1")
    if cast == "signal":
        return (pl.when(col.str.contains(r"^\d+$")).then(col.replace(_SIGNAL_NAMES))
                .otherwise(col.str.strip_prefix("SIG")))
    return col


def _title_expr(template: str, fields: Sequence[str]) -> pl.Expr:
    """`render_title()` as a polars expression: fields, then the event columns, missing or null as `?`; a
    parenthesised aside or a tail `: {name}` naming a missing one left out."""
    parts: list[pl.Expr] = []
    tail = TAIL.search(template)
    if tail:
        value = _value_expr(tail.group(1), fields)
        head = _title_expr(template[:tail.start()], fields)
        return pl.when(value.is_not_null()).then(pl.concat_str([head, pl.lit(": "), value])).otherwise(head)
    at = 0
    for m in ASIDE.finditer(template):
        parts.extend(_template_parts(template[at:m.start()], fields))
        names = aside_names(m.group(1))  # a title's placeholders were checked when its pack loaded
        inner = _template_parts(m.group(0), fields)
        if names and inner:
            known = pl.all_horizontal([_value_expr(n, fields).is_not_null() for n in names])
            parts.append(pl.when(known).then(pl.concat_str(inner)).otherwise(pl.lit("")))
        else:
            parts.extend(inner)
        at = m.end()
    parts.extend(_template_parts(template[at:], fields))
    return pl.concat_str(parts) if parts else pl.lit("")


def _value_expr(name: str, fields: Sequence[str]) -> pl.Expr:
    """A title placeholder's value: the event's unit or pid, a field, another event column; null when none."""
    if name in ("unit", "pid"):
        return pl.col(f"__e_{name}").cast(pl.String)
    if name in fields:
        return pl.col(f"__f_{name}").cast(pl.String)
    if name in ("host", "rank", "rule", "kind"):
        return pl.col(f"__e_{name}").cast(pl.String)
    return pl.lit(None, dtype=pl.String)


def _template_parts(template: str, fields: Sequence[str]) -> list[pl.Expr]:
    import string

    parts: list[pl.Expr] = []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        if literal:
            parts.append(pl.lit(literal))
        if name is not None:
            parts.append(_value_expr(name, fields).fill_null("?"))
    return parts


@dataclass(frozen=True)
class _VectorPlan:
    """A vectorised rule's events as polars expressions, built once per rule (building them, `extract_groups`
    compiling its pattern to learn the groups, cost more than running them on a flush's few candidates)."""

    filters: tuple[pl.Expr, ...]   # its `applies` and `exclude`
    groups: pl.Expr                 # the struct of its pattern's groups (`_m`: the whole match, null for none)
    fields: tuple[pl.Expr, ...]     # `__f_<name>`: each group, cast
    event: tuple[pl.Expr, ...]      # `__e_<column>`: what the title may name besides the fields
    out: tuple[pl.Expr, ...]        # the event's own columns (`_with_records` adds its record's)


_PLANS: dict[int, tuple[Rule, _VectorPlan]] = {}   # id(rule) -> (the rule, its plan); the rule kept: ids stay its own
_MAX_PLANS = 4096


def _vector_plan(rule: Rule) -> _VectorPlan:
    got = _PLANS.get(id(rule))
    if got is not None and got[0] is rule:
        return got[1]
    names = sorted(g for g in rule.groups if not g.startswith("_"))
    casts = dict(rule.casts)
    filters = [f for f in (applies_expr(rule),) if f is not None]
    if rule.exclude:
        filters.append(~pl.col("message").str.contains(rule.exclude).fill_null(False))
    group = pl.col("__g").struct.field
    frags = [pl.when(pl.col(f"__f_{n}").is_not_null()).then(
        pl.struct(pl.col(f"__f_{n}").alias(n)).struct.json_encode().str.slice(1).str.strip_suffix("}"))
        for n in names]
    fields = (pl.concat_str([pl.lit("{"), pl.concat_str(frags, separator=",", ignore_nulls=True), pl.lit("}")])
              if frags else pl.lit("{}"))
    unit = (pl.coalesce(pl.col("__f_unit"), pl.col("unit")) if "unit" in names else pl.col("unit"))
    pid = (pl.coalesce(pl.col("__f_pid").cast(pl.Int64, strict=False), pl.col("pid")) if "pid" in names
           else pl.col("pid"))
    plan = _VectorPlan(
        filters=tuple(filters),
        groups=_groups_expr(rule.pattern),
        fields=tuple(_cast_expr(group(n), casts.get(n)).alias(f"__f_{n}") for n in names),
        event=(unit.alias("__e_unit"), pid.alias("__e_pid"), pl.col("host").alias("__e_host"),
               pl.col("rank").alias("__e_rank"), pl.lit(rule.id).alias("__e_rule"),
               pl.lit(rule.kind).alias("__e_kind")),
        out=(ROW, POS, pl.lit(rule.kind).alias("kind"), pl.lit(rule.id).alias("rule"),
             pl.lit(rule.severity.value).alias("severity"), pl.lit(rule.role.value).alias("role"),
             pl.col("__e_unit").cast(pl.String).alias("unit"), pl.col("__e_pid").cast(pl.Int64).alias("pid"),
             _title_expr(rule.title, names).alias("title"), fields.alias("fields"),
             pl.lit(None, dtype=pl.Int64).alias("__line"), pl.lit(None, dtype=pl.Int64).alias("__end")))
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[id(rule)] = (rule, plan)
    return plan


def _events_vectorised(rule: Rule, sub: pl.DataFrame) -> pl.LazyFrame:
    """The rule's events from its candidate records `sub` (their `_narrow_all` columns) without their record
    columns: ROW, POS, kind, rule, severity, role, unit, pid, title and fields (`_with_records` adds the rest, for the
    events of every vectorised rule at once), as one lazy query."""
    p = _vector_plan(rule)
    lf = sub.lazy()
    for f in p.filters:
        lf = lf.filter(f)
    return (lf.with_columns(p.groups).filter(pl.col("__g").struct.field("_m").is_not_null())
            .with_columns(*p.fields).with_columns(*p.event).select(*p.out))


def _with_records(parts: list[pl.DataFrame], cand: pl.DataFrame) -> pl.DataFrame:
    """The rules' events (ROW, POS: their record's position in `cand`, the event's own columns, and
    `__line`/`__end` where its lines are not its record's: a context widened them) -> events (EVENT_SCHEMA)
    sorted by (path, line, rule): the order is found on the narrow frame, then the record columns (the message,
    ...) are gathered once, in that order (sorting the whole events doubled a flush's peak memory)."""
    df = pl.concat(parts)
    at = cand.select("path", "line", "line_end")[df.get_column(POS)]
    df = df.with_columns(at.get_column("path"), pl.coalesce(pl.col("__line"), at.get_column("line")).alias("line"),
                         pl.coalesce(pl.col("__end"), at.get_column("line_end")).alias("line_end"))
    df = df.drop("__line", "__end").sort(["path", "line", "rule"], nulls_last=True, maintain_order=True)
    rest = [c for c in _EVENT_RECORD_COLS if c not in df.columns]
    df = df.hstack(cand.select(*rest)[df.get_column(POS)])
    return df.select(*EVENT_SCHEMA).cast(EVENT_SCHEMA)


# -- the general path: context lookups, derived fields, lookups and rich casts in Python (few events)

def _events_python(rule: Rule, found: dict[int, _Found], cand: pl.DataFrame, rules: RuleSet) -> pl.DataFrame:
    rows = sorted(found)
    at = _positions(cand, pl.Series(rows, dtype=pl.UInt32))
    recs = cand.select(ROW, "unit", "pid", "host", "rank")[at]
    info = {r: (u, p, h, k) for r, u, p, h, k in recs.iter_rows()}
    out: dict[str, list[Any]] = {ROW: [], "__unit": [], "__pid": [], "title": [], "fields": [], "__line": [],
                                 "__end": []}
    for row in rows:
        f = found[row]
        r_unit, r_pid, host, rank = info[row]
        fields = _finish_fields(rule, f.groups, rules)
        unit = fields["unit"] if isinstance(fields.get("unit"), str) else r_unit
        pid = _as_pid(fields["pid"]) if fields.get("pid") is not None else r_pid
        values = {"host": host, "rank": rank, "rule": rule.id, "kind": rule.kind, **fields, "unit": unit, "pid": pid}
        out[ROW].append(row)
        out["__unit"].append(unit)
        out["__pid"].append(pid)
        out["title"].append(render_title(rule.title, values))
        out["fields"].append(_fields_json(fields))
        out["__line"].append(f.line)
        out["__end"].append(f.line_end)
    df = pl.DataFrame(out, schema={ROW: pl.UInt32, "__unit": pl.String, "__pid": pl.Int64, "title": pl.String,
                                   "fields": pl.String, "__line": pl.Int64, "__end": pl.Int64})
    return df.select(
        ROW, at.alias(POS), pl.lit(rule.kind).alias("kind"), pl.lit(rule.id).alias("rule"),
        pl.lit(rule.severity.value).alias("severity"), pl.lit(rule.role.value).alias("role"),
        pl.col("__unit").alias("unit"), pl.col("__pid").alias("pid"), "title", "fields", "__line", "__end")


def _frame(records: pl.DataFrame, offset: int = 0, extra: Sequence[str] = ()) -> pl.DataFrame:
    """The columns matching reads (and the `extra` ones it passes through), with a row id (`ROW`) from `offset`."""
    cols = [c for c in (*_REC_COLS, *extra) if c in records.columns]
    recs = records.select(cols).with_row_index(ROW, offset=offset)
    missing = [pl.lit(None, dtype=RECORD_SCHEMA[c]).alias(c) for c in _REC_COLS if c not in recs.columns]
    return recs.with_columns(missing) if missing else recs


def match_records(records: pl.DataFrame, rules: RuleSet, *, regex_timeout: float = REGEX_TIMEOUT,
                  vectorise: bool = True, budget: RegexBudget | None = None) -> pl.DataFrame:
    """Apply every rule to the records (RECORD_SCHEMA); events in EVENT_SCHEMA sorted by (path, line, rule).
    `vectorise=False` sends every rule through the general (Python) path; the output is the same.
    `engine: regex` rules run within `budget` (pass one per source to bound them over all its batches and
    to learn which rules timed out: `budget.timeouts()`); without one, a fresh budget for this call."""
    if records.height == 0 or not rules.rules:
        return empty_events()
    cand, pairs = _prefilter(_frame(records), rules)
    return _apply_rules(cand, pairs, rules, budget if budget is not None else RegexBudget(timeout=regex_timeout),
                        vectorise)


_MAX_IDENT_CONDS = 64   # single-identifier prefilters a matcher keeps (past them, a batch takes the full one)
_MAX_SPLIT_FORMATS = 4  # formats a batch of many identifiers is split by (past them, it takes the full prefilter)


class Matcher:
    """Matching over a stream of record batches (one source). Each batch is prefiltered when it comes (one
    pass over its messages); only its candidate records are kept, copied out of the batch's buffers, and the rules
    run over the candidates of many batches at once (which literals each holds is found then too): their fixed
    cost per rule is paid per `flush_rows` candidates rather than per batch. Context patterns see across every
    cut, batch or flush: a flush keeps the candidates a later event's context may read before it (within the
    rules' `lines`), and leaves the records from the first whose rule reads a context *after* it that has not
    been read yet to the next flush (with everything after them: the events come in line order). `engine:
    regex` rules run within `budget` (one per source: `budget.timeouts()` tells which timed out)."""

    def __init__(self, rules: RuleSet, *, flush_rows: int = 65_536, flush_bytes: int = 16 << 20,
                 budget: RegexBudget | None = None, carry: Sequence[str] = ()) -> None:
        self.rules = rules
        self.carry = tuple(carry)  # record columns the events of `finish` carry too, after EVENT_SCHEMA's
        self.budget = budget if budget is not None else RegexBudget()
        self.flush_rows, self.flush_bytes = flush_rows, flush_bytes
        self._cand: list[pl.DataFrame] = []
        self._held: pl.DataFrame | None = None   # candidates kept by the last flush: context, and deferred anchors
        self._from = 0                          # the first ROW not yet tried as an anchor
        self._rows = self._kept = self._bytes = 0   # records seen (ROW ids), new candidates kept, their message bytes
        self._last = 0                          # the last line of the records seen
        self._table = _literal_tables(rules)
        # what a flush's work and events grow with: the (rule, context) keys its candidates lead to. Rules that
        # share literals make a candidate lead to more (the built-in packs 1.04 keys a literal; copied under 4x
        # the ids, 4.16, and a flush of 65 k candidates made 195 k events, 150 MiB above the stream's peak), so
        # a flush comes after `flush_rows` keys' worth of candidates
        self._keys_per_literal = max(1.0, self._table.height / max(1, self._table.get_column("_lit").n_unique()))
        self._conds: dict[tuple[str | None, str | None], pl.Expr | None] = {(None, None): _prefilter_expr(rules)}
        # rule -> how many lines after its anchor a context pattern of it may read (rules with one only)
        self._ahead = pl.DataFrame(
            [(i, max(c.lines for c in r.context if c.direction is Direction.AFTER)) for i, r in enumerate(rules.rules)
             if any(c.direction is Direction.AFTER for c in r.context)],
            schema={"_kr": pl.Int32, "_ahead": pl.Int64}, orient="row")
        # (rule, context) -> how many lines before a later anchor its context pattern may read
        self._ctx_lines = pl.DataFrame(
            [(i, j, c.lines) for i, r in enumerate(rules.rules) for j, c in enumerate(r.context)
             if c.direction is Direction.BEFORE],
            schema={"_kr": pl.Int32, "_kc": pl.Int32, "_lines": pl.Int64}, orient="row")

    def add(self, records: pl.DataFrame) -> pl.DataFrame:
        """Take a batch; returns the events of a flush when enough candidates have gathered, else none."""
        return self.flush() if self.keep(records) else empty_events()

    def keep(self, records: pl.DataFrame) -> bool:
        """Prefilter a batch and keep its candidates; True when enough have gathered for a flush (`flush`)."""
        if records.height and self.rules.rules:
            cand = self._candidates(_frame(records, self._rows, self.carry), records)
            if cand.height:
                cand = detached(cand)  # the kept rows would otherwise keep the whole batch's text alive
                self._cand.append(cand)
                self._kept += cand.height
                self._bytes += int(cand.get_column("message").str.len_bytes().sum() or 0)
            self._rows += records.height
            # the greatest line number: a record's `line_end` where known, else its `line` (two scans of the
            # columns, no query: a batch's plan and its wait for the interpreter cost more than the scans)
            for c in ("line_end", "line"):
                if c in records.columns and (last := records.get_column(c).max()) is not None:
                    self._last = max(self._last, int(last))
        return self._kept * self._keys_per_literal >= self.flush_rows or self._bytes >= self.flush_bytes

    def _candidates(self, frame: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
        """The batch's candidate rows (`frame` is its `_frame`). A batch of one identifier or one format takes
        its `_cond`. A batch of a few formats and many identifiers (an SGLang log with a few `glog` lines of
        NCCL's among its own; a journal's first batch, with the `-- Journal begins` line) is split by format,
        each part with its own: the full prefilter took 140 k `Decode batch` lines of the corpus's SGLang logs
        for candidates (their `cuda graph`: the literal of dpkg's rule, whose `applies` admits no SGLang line), 16%
        of the candidates of the 1.5 GiB of corpus it searched."""
        key = (_only(records, "ident"), _only(records, "format"))
        formats = frame.get_column("format").n_unique() if key == (None, None) else 0   # `_frame` has the column
        if not 1 < formats <= _MAX_SPLIT_FORMATS or frame.get_column("format").null_count():
            return _candidate_rows(frame, self._cond(key))
        # one pass splits the batch (a filter per format read every row again)
        parts = frame.partition_by("format", as_dict=True)
        return pl.concat([_candidate_rows(part, self._cond((_only(part, "ident"), f)))
                          for (f,), part in sorted(parts.items())]).sort(ROW)

    def _cond(self, key: tuple[str | None, str | None]) -> pl.Expr | None:
        """The prefilter of records of this (identifier, format) (None: several): when its records all have one
        identifier, or one format, only the literals of the rules that may apply to them (an SGLang log's
        batches search 58 literals instead of 113: 30% less time; a journal's leave out the rules of
        `systemctl is-active` answers or `systemctl show` output); else all."""
        if key not in self._conds:
            if len(self._conds) > _MAX_IDENT_CONDS:
                key = (None, None)
            else:
                self._conds[key] = _prefilter_expr(self.rules, *key)
        return self._conds[key]

    def flush(self) -> pl.DataFrame:
        """The events of the candidates gathered so far whose contexts have all been seen (mid-stream)."""
        return self._run(final=False)

    def finish(self) -> pl.DataFrame:
        """The events of every candidate left (call at the end of the stream), each with the `carry` columns of
        its record (when there are events: a source's lines are unique, an event's is its record's)."""
        return self._run(final=True)

    def _run(self, final: bool) -> pl.DataFrame:
        held = [] if self._held is None else [self._held]
        untried = bool(held) and int(held[0][ROW].max()) >= self._from
        if not self._cand and not (final and untried):
            if final:
                self._reset()
            return empty_events()
        cand = pl.concat([*held, *self._cand], rechunk=True)
        self._cand, self._kept, self._bytes = [], 0, 0
        pairs = _pairs(cand, self.rules, self._table)
        row = pl.col(ROW)
        end = None if final else self._deferred_from(cand, pairs)
        anchors = row >= self._from if end is None else row.is_between(self._from, end, closed="left")
        events = _apply_rules(cand, pairs.filter(anchors | (pl.col("_kc") != -1)), self.rules, self.budget, True)
        carry = [c for c in self.carry if c in cand.columns]
        if carry and events.height:
            events = events.join(cand.select("line", *carry), on="line", how="left", maintain_order="left")
        if final:
            self._reset()
        else:
            self._hold(cand, pairs, end)
        return events

    def _deferred_from(self, cand: pl.DataFrame, pairs: pl.DataFrame) -> int | None:
        """The ROW of the first candidate a rule may anchor on whose context after it reaches past the records
        seen (None: no such candidate)."""
        if self._ahead.is_empty():
            return None
        late = (pairs.filter((pl.col("_kc") == -1) & (pl.col(ROW) >= self._from)).join(self._ahead, on="_kr")
                .join(cand.select(ROW, "line_end"), on=ROW)
                .filter(pl.col("line_end") + 1 + pl.col("_ahead") > self._last))
        return int(late[ROW].min()) if late.height else None

    def _hold(self, cand: pl.DataFrame, pairs: pl.DataFrame, end: int | None) -> None:
        """Keep what a later flush needs: the candidates from `end` on (not tried yet) and those before that a
        context pattern may read before a later anchor. ROW ids are rebased so that they stay small."""
        row = pl.col(ROW)
        if end is None:
            first_line = self._last + 1
        else:
            first_line = int(cand.filter(row == end)["line"][0])
        before = cand if end is None else cand.filter(row < end)
        reach = (pairs.join(self._ctx_lines, on=["_kr", "_kc"]).join(before.select(ROW, "line_end"), on=ROW)
                 .filter(pl.col("line_end") >= first_line - 1 - pl.col("_lines")).select(ROW).unique())
        parts = [before.join(reach, on=ROW, how="semi")]
        if end is not None:
            parts.append(cand.filter(row >= end))
        held = pl.concat(parts).sort(ROW)
        base = int(held[ROW].min()) if held.height else self._rows
        # copied out: the rows kept would otherwise keep the text of every candidate of this flush alive
        self._held = detached(held.with_columns((row - base).cast(pl.UInt32))) if held.height else None
        self._from = (end if end is not None else self._rows) - base
        self._rows -= base

    def _reset(self) -> None:
        self._cand, self._held = [], None
        self._from = self._rows = self._kept = self._bytes = self._last = 0


def _apply_rules(cand: pl.DataFrame, pairs: pl.DataFrame, rules: RuleSet, budget: RegexBudget,
                 vectorise: bool) -> pl.DataFrame:
    """Each rule over its candidate rows -> events, sorted by (path, line, rule)."""
    if cand.height == 0:
        return empty_events()
    keys = _keys(pairs)
    parts: list[pl.DataFrame] = []
    partial: list[pl.DataFrame] = []   # vectorised rules' events, their record columns still to add
    narrow: pl.DataFrame | None = None  # the candidates' columns the vectorised rules read
    for i, rule in enumerate(rules.rules):
        if vectorise and vectorisable(rule):
            at = keys.get(_Key(i))
            if at is not None and at.len():
                if narrow is None:
                    narrow = cand.with_row_index(POS).select(_narrow_all(rules))
                # one rule's query at a time: all of a flush's rules in one query held every rule's records and
                # intermediates at once (4x the rules: 599 MiB, against 466 MiB one by one)
                partial.append(_events_vectorised(rule, narrow[at]).collect())
            continue
        sub, hits = _rule_matches(rule, keys.get(_Key(i)), cand, budget)
        if hits.height == 0:
            continue
        anchors = sub.filter(pl.col(ROW).is_in(hits[ROW].implode()))
        where = dict(zip(anchors[ROW].to_list(), zip(anchors["line"].to_list(), anchors["line_end"].to_list())))
        found: dict[int, _Found] = {}
        for d in hits.iter_rows(named=True):
            row = d.pop(ROW)
            a, b = where[row]
            found[row] = _Found(row=row, groups=d, line=a, line_end=b)
        if rule.context:
            _context_fields(rule, anchors, cand, keys, i, found)
        parts.append(_events_python(rule, found, cand, rules))
    # the general path's events first, as the order of equal (path, line, rule) keys always was
    parts.extend(p for p in partial if p.height)
    if not parts:
        return empty_events()
    return _with_records(parts, cand)


def event_fields(events: pl.DataFrame) -> list[dict[str, Any]]:
    """The `fields` column parsed back into dicts."""
    return [json.loads(s) if s else {} for s in events["fields"].to_list()]


# ----------------------------------------------------------------------------------------------------------
# examples: every rule's examples are its tests


@dataclass(frozen=True)
class ExampleResult:
    rule: str
    location: Location
    expect_match: bool
    ok: bool
    problem: str = ""

    def __str__(self) -> str:
        what = "example" if self.expect_match else "near-miss"
        return f"{self.location}: {self.rule}: {what}: {'ok' if self.ok else self.problem}"


def _default_parse(text: str, fmt: str | None, path: str) -> pl.DataFrame:
    from .parse import parse_text

    return parse_text(text, fmt=fmt, path=path)


def _same(expected: Any, got: Any) -> bool:
    """Expected example field == extracted field (numbers compared as numbers, dicts as subsets)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, int) and isinstance(got, int):
        return expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, dict) and isinstance(got, dict):
        return all(k in got and _same(v, got[k]) for k, v in expected.items())
    return expected == got


def run_examples(rules: RuleSet, *, parse: Callable[[str, str | None, str], pl.DataFrame] | None = None,
                 only: Iterable[str] = ()) -> list[ExampleResult]:
    """Run every example of every rule (or of the rule ids in `only`): each matching example must yield an
    event of its rule with the listed fields, each near-miss must yield none of its rule."""
    parse = parse or _default_parse
    want = set(only)
    todo: list[tuple[Rule, Any, bool, str]] = []
    frames: list[pl.DataFrame] = []
    results: list[ExampleResult] = []
    parsed: dict[str, pl.DataFrame] = {}
    for rule in rules.rules:
        if want and rule.id not in want:
            continue
        for expect, exs in ((True, rule.examples), (False, rule.near_misses)):
            for ex in exs:
                key = f"<example {len(todo)}>"
                try:
                    recs = parse(ex.text, ex.format, key)
                except Exception as e:  # noqa: BLE001 - a parser failure is this example's failure
                    results.append(ExampleResult(rule.id, ex.location, expect, False,
                                                 f"could not parse the example: {type(e).__name__}: {e}"))
                    continue
                frames.append(recs.with_columns(pl.lit(key).alias("path")))
                todo.append((rule, ex, expect, key))
                parsed[key] = recs
    budget = RegexBudget()
    if frames:
        events = match_records(pl.concat(frames, how="vertical_relaxed"), rules, budget=budget)
    else:
        events = empty_events()
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in events.iter_rows(named=True):
        by_key.setdefault((d["path"], d["rule"]), []).append(d)
    for rule, ex, expect, key in todo:
        evs = by_key.get((key, rule.id), [])
        if not expect:
            ok = not evs
            results.append(ExampleResult(rule.id, ex.location, False, ok,
                                         "" if ok else f"matched but must not: {evs[0]['title']!r}"))
            continue
        if not evs:
            others = sorted({r for (k, r) in by_key if k == key})
            hint = f" (matched by: {', '.join(others)})" if others else ""
            if rule.id in budget.timed_out_on(key, 0, 1 << 62):
                hint += f" (its pattern timed out after {budget.timeout:g} s: it backtracks catastrophically)"
            else:  # as explain says it (which imports this module: imported here)
                from .explain import why_no_event

                hint += why_no_event(rule, parsed[key])
            results.append(ExampleResult(rule.id, ex.location, True, False, f"did not match{hint}"))
            continue
        ev = evs[0]
        fields = json.loads(ev["fields"])
        bad = []
        for k, v in ex.fields:
            got = ev[k] if k in ("unit", "pid", "host") else fields.get(k)
            if not _same(v, got):
                bad.append(f"{k}: expected {v!r}, got {got!r}")
        results.append(ExampleResult(rule.id, ex.location, True, not bad, "; ".join(bad)))
    return results

"""explain: which rules match a line, and when none does, which came closest and where it failed.

    ex = explain(parse_text(line), load_rules())     # per record: its events, or the nearest rules

A near miss is found in the rule's pattern read as a sequence of top-level items (`top_level`): the longest
prefix of it that matches the message (a binary search: a prefix that matches implies all shorter ones do), the
part that failed next, and a score (the pattern's literal characters matched, as a share of all of them). A line
with a typo (`Killed proces 48213`, `code=kiled`) stops an exact prefix early, so the prefix is also searched for
with a few edits allowed (the `regex` module's fuzzy matching: a character missing, one too many, or another in
its place), and kept when it reaches on past the edits (`typo_prefix`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any

import polars as pl
import regex

from .match import globs_admit, match_records
from .regexbudget import REGEX_TIMEOUT, RegexBudget
from .rulemodel import Rule, RuleSet, split_flags


def _escape_end(p: str, i: int) -> int:
    nxt = p[i + 1:i + 2]
    if nxt in ("x", "u", "U", "p", "P", "N") and p[i + 2:i + 3] == "{":
        j = p.find("}", i + 3)
        return (j + 1) if j > 0 else len(p)
    if nxt == "x":
        return i + 4
    if nxt == "u":
        return i + 6
    if nxt in ("p", "P"):
        return i + 3
    return i + 2


def _class_end(p: str, i: int) -> int:
    j = i + 1
    if p[j:j + 1] == "^":
        j += 1
    if p[j:j + 1] == "]":
        j += 1
    depth = 1
    while j < len(p):
        c = p[j]
        if c == "\\":
            j = _escape_end(p, j)
            continue
        if c == "[" and p[j + 1:j + 2] == ":":
            k = p.find(":]", j + 2)
            if k > 0:
                j = k + 2
                continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(p)


def _group_end(p: str, i: int) -> int:
    depth, j = 0, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j = _escape_end(p, j)
            continue
        if c == "[":
            j = _class_end(p, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(p)


_QUANT = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})[?+]?")


def top_level(pattern: str) -> tuple[str, list[list[str]]]:
    """(leading flags, branches): each branch the list of the pattern's top-level items (a literal
    character, an escape, a class or a group, with its quantifier)."""
    flags, p = split_flags(pattern)
    branches: list[list[str]] = []
    items: list[str] = []
    i = 0
    while i < len(p):
        c = p[i]
        q = _QUANT.match(p, i)
        if q and items:
            items[-1] += q.group(0)
            i = q.end()
            continue
        if c == "\\":
            j = _escape_end(p, i)
        elif c == "[":
            j = _class_end(p, i)
        elif c == "(":
            j = _group_end(p, i)
        elif c == "|":
            branches.append(items)
            items = []
            i += 1
            continue
        else:
            j = i + 1
        items.append(p[i:j])
        i = j
    branches.append(items)
    return flags, branches


def _literal_char(item: str) -> str | None:
    """The character a top-level item stands for, if it is a plain (unquantified) literal."""
    if len(item) == 1 and item not in ".^$|()[]{}*+?":
        return item
    if len(item) == 2 and item[0] == "\\" and not item[1].isalnum():
        return item[1]
    return None


_GROUP_OPEN = re.compile(r"\((?:\?P<\w+>|\?<(?![=!])\w+>|\?:|(?!\?))")


def literal_count(item: str) -> int:
    """The literal characters every match of a top-level item holds: 1 for a literal, for a group (not
    quantified, or `+`) the fewest of its branches' (`(?P<state>Started|Starting)`: 7), else 0."""
    if _literal_char(item) is not None:
        return 1
    body = item[:-1] if item.endswith("+") and not item.endswith("\\+") else item
    m = _GROUP_OPEN.match(body)
    if m is None or not body.endswith(")"):
        return 0
    _, branches = top_level(body[m.end():-1])
    return min(sum(literal_count(x) for x in branch) for branch in branches)


@dataclass(frozen=True)
class NearMiss:
    rule: str
    kind: str
    matched: str          # the text the longest matching prefix of the pattern covered
    missing: str          # the part of the pattern that failed next ('' when the whole pattern matched)
    score: float          # literal characters matched, less the edits, / literal characters in the pattern
    matched_literals: int  # literal characters matched, less the edits
    reason: str = ""      # when the pattern matches but the rule does not apply (applies, exclude, context)
    edits: tuple[str, ...] = ()  # the typos the match allowed, each said with where it is in the message

    def describe(self) -> str:
        return f"{self.rule}: {self.detail()}" if self.reason else f"near miss: {self.rule}: {self.detail()}"

    def detail(self) -> str:
        """What came close, without the rule's name."""
        if self.reason:
            return f"the pattern matches, but {self.reason}"
        typos = f"{len(self.edits)} edit{'s' if len(self.edits) > 1 else ''} ({'; '.join(self.edits)})"
        if not self.missing:  # a typo'd match of the whole pattern
            return f"the whole pattern matches `{self.matched}` but for {typos}"
        if self.edits:
            return f"matched `{self.matched}`, with {typos}, but not `{self.missing}`"
        return f"matched `{self.matched}` but not `{self.missing}`"


NEAR_RATIO = 0.4
NEAR_MIN_LITERALS = 8
TYPO_EVERY = 12   # literal characters of a pattern per edit a typo'd match may make (at most TYPO_MAX)
TYPO_MAX = 3
TYPO_GAIN = 4     # literal characters a typo'd prefix must match past the exact one, beyond one per edit
TYPO_TIMEOUT = 0.02  # seconds: a fuzzy search stopped after this is taken as no match


def near_miss(rule: Rule, message: str) -> NearMiss | None:
    """The longest prefix of the rule's top-level sequence that still matches `message`, exactly or, further,
    with a few typos (`typo_prefix`)."""
    flags, branches = top_level(rule.pattern)
    best: NearMiss | None = None
    for items in branches:
        lits = [_literal_char(x) for x in items]
        counts = [literal_count(x) for x in items]
        total = sum(counts)
        k, m_lo = _longest_prefix(flags, items, message, 0, None)
        edits: tuple[str, ...] = ()
        at = m_lo.start() if m_lo is not None else None
        typo = typo_prefix(flags, items, message, k, at, counts) if k < len(items) else None
        if typo is not None:
            k, m_lo = typo
            edits = _edit_notes(message, m_lo.fuzzy_changes)
        got = sum(counts[:k]) - len(edits)
        if k == len(items):
            missing, matched = "", (m_lo.group(0) if m_lo else "")
        else:
            if lits[k] is not None:
                word = ""
                for x in lits[k:]:
                    if x is None or (word and not x.isalnum()):
                        break
                    word += x
                missing = word
            else:
                missing = items[k]
            matched = m_lo.group(0) if m_lo else ""
            lead = 0
            while lead < k and lits[lead] is None:
                lead += 1
            if lead and m_lo is not None:
                try:
                    pm = _compiled(flags + "".join(items[:lead]), 0).match(message, m_lo.start())
                except regex.error:
                    pm = None
                if pm is not None and pm.end() > m_lo.start():
                    matched = "..." + message[pm.end():m_lo.end()]
        nm = NearMiss(rule=rule.id, kind=rule.kind, matched=matched.replace("\n", "\\n"), missing=missing,
                      score=got / total if total else 0.0, matched_literals=got, edits=edits)
        if best is None or (nm.score, nm.matched_literals) > (best.score, best.matched_literals):
            best = nm
    return best


def _search(flags: str, items: list[str], message: str, typos: int | None, best: bool = False,
            at: int | None = None) -> regex.Match | None:
    """The first match of the prefix `items` (None: none, or it timed out), or the match starting `at`; with
    `typos`, allowing that many edits (`best`: the match with the fewest), within TYPO_TIMEOUT."""
    body = "".join(items)
    if typos:
        body = f"(?:{body}){{e<={typos}}}"
    try:
        rx = _compiled(flags + body, regex.BESTMATCH if best else 0)
        timeout = TYPO_TIMEOUT if typos else REGEX_TIMEOUT
        return rx.search(message, timeout=timeout) if at is None else rx.match(message, at, timeout=timeout)
    except (regex.error, TimeoutError):
        return None


@lru_cache(maxsize=8192)
def _compiled(pattern: str, flags: int) -> regex.Pattern:
    """A prefix pattern, compiled once: a line's search compiles up to a dozen per rule, more than the `regex`
    module's own cache holds for all rules, and compiling costs more than the search."""
    return regex.compile(pattern, flags)


def _longest_prefix(flags: str, items: list[str], message: str, lo: int, typos: int | None,
                    at: int | None = None) -> tuple[int, regex.Match | None]:
    """The most items of the pattern, from `lo` on (a prefix known to match), that still match (from `at`), and
    their match: a binary search, since a prefix that matches (with at most `typos` edits) implies all shorter ones
    do."""
    hi, m_lo = len(items), None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        m = _search(flags, items[:mid], message, typos, at=at)
        if m is not None:
            lo, m_lo = mid, m
        else:
            hi = mid - 1
    return lo, m_lo


def typo_prefix(flags: str, items: list[str], message: str, exact: int, at: int | None = None,
                counts: Sequence[int] | None = None) -> tuple[int, regex.Match] | None:
    """A longer prefix of the pattern than the `exact` items that match (from `at`, where they do), matched with a
    few edits (one per TYPO_EVERY literal characters of the pattern, at most TYPO_MAX: a character missing, one too
    many or another in its place), and its match with the fewest edits; None unless it matches at least TYPO_GAIN
    literal characters more than its edits past the exact prefix: a line cut short is not a typo (`...anon-rss:9`
    is one `kB` short of the next item, not two edits from it). The typo'd match is looked for where the exact
    prefix matched: a fuzzy search at every position of a pattern with a lazy class is slow (50 ms a line).
    `counts`: each item's `literal_count`, when the caller has them."""
    seen = [0, *accumulate(literal_count(x) for x in items)] if counts is None else [0, *accumulate(counts)]
    typos = min(TYPO_MAX, seen[-1] // TYPO_EVERY)
    if typos < 1:
        return None
    # the shortest prefix worth the try: one edit and TYPO_GAIN literal characters past the exact prefix (when it
    # does not match, no longer one does, and a line's search costs one fuzzy search per rule)
    start = next((j for j in range(exact + 1, len(items) + 1) if seen[j] >= seen[exact] + 1 + TYPO_GAIN), None)
    if start is None or _search(flags, items[:start], message, typos, at=at) is None:
        return None
    longest, _ = _longest_prefix(flags, items, message, start, typos, at)
    # the longest prefix may have spent edits on the pattern's next characters where the line ends or goes
    # another way (`kB, a` with `, a` missing): of it and the few prefixes shorter by an edit's item, the one that
    # matches the most literal characters beyond its edits (with fewer edits, where that is the same)
    best: tuple[tuple[int, int], int, regex.Match] | None = None
    for k in range(longest, max(start, longest - typos) - 1, -1):
        m = _search(flags, items[:k], message, typos, best=True, at=at)
        if m is not None:
            n = sum(m.fuzzy_counts)
            if best is None or (seen[k] - n, -n) > best[0]:
                best = ((seen[k] - n, -n), k, m)
    if best is None:
        return None
    _, k, m = best
    n = sum(m.fuzzy_counts)
    if n == 0 or seen[k] - seen[exact] < n + TYPO_GAIN or n * TYPO_EVERY > seen[k]:
        return None
    return k, m


def _edit_notes(message: str, changes: tuple[list[int], list[int], list[int]]) -> tuple[str, ...]:
    """Each edit of a fuzzy match (`Match.fuzzy_changes`: the message's positions of the characters in another's
    place, the characters too many, and where one is missing) said with the word it is in and its column."""
    subs, extra, gone = changes
    # the regex module counts each missing character's position past the ones missing before it (`abcdefghij`
    # against `abdfhj`: 2, 4, 6, 8 for 2, 3, 4, 5): put back in the message's own positions; any position left
    # outside the message (the module's other known slips) is held to its ends
    gone = [p - k for k, p in enumerate(sorted(gone))]
    out = []
    for pos, what in sorted([(p, "a wrong character") for p in subs] + [(p, "a character too many") for p in extra]
                            + [(p, "a character missing") for p in gone]):
        pos = min(max(pos, 0), len(message))
        out.append(f"{what} in `{_word_at(message, pos)}`, column {pos + 1}")
    return tuple(out)


def _word_at(message: str, pos: int) -> str:
    """The run of non-blank characters holding position `pos` (or ending just before it)."""
    if pos >= len(message) or message[pos].isspace():
        pos -= 1
    if pos < 0 or message[pos].isspace():
        return message[max(0, pos - 8):pos + 9].replace("\n", "\\n")
    a = b = pos
    while a > 0 and not message[a - 1].isspace():
        a -= 1
    while b + 1 < len(message) and not message[b + 1].isspace():
        b += 1
    word = message[a:b + 1]
    return word if len(word) <= 40 else message[max(a, pos - 20):pos + 20]


def why_not(rule: Rule, record: Mapping[str, Any]) -> str:
    """Why a rule whose pattern matches the record's message produced no event ('' if it should have)."""
    for col, globs in rule.applies.columns():
        v = record.get(col)
        if v is not None and not globs_admit(globs, v):
            return f"the rule applies only where {col} is {' or '.join(globs)} (this record: {col}={v})"
    msg = record.get("message") or ""
    if rule.exclude and regex.search(rule.exclude, msg):
        return f"the record matches the rule's exclude pattern `{rule.exclude}`"
    if rule.literals:
        hay = msg.lower() if rule.ignore_case else msg
        if not any(x in hay for x in rule.literals):
            return f"none of the rule's prefilter literals occurs ({', '.join(map(repr, rule.literals))})"
    return ""


def closest(rule: Rule, record: Mapping[str, Any]) -> NearMiss | None:
    """How close the rule came to the record: its near miss, or, where its whole pattern matches exactly, why it
    made no event (`reason`, score 1)."""
    nm = near_miss(rule, record.get("message") or "")
    if nm is None or nm.missing or nm.edits:
        return nm
    reason = why_not(rule, record) or "its context or casts produced no event"
    return NearMiss(nm.rule, nm.kind, nm.matched, "", 1.0, nm.matched_literals, reason)


def why_no_event(rule: Rule, recs: pl.DataFrame) -> str:
    """For `rules test`: where the rule's pattern stopped matching an example's closest record (its near miss), or
    why a pattern that matches gave no event (`: ...`); '' when no part of the pattern matches."""
    found = [nm for rec in recs.iter_rows(named=True) if (nm := closest(rule, rec)) is not None]
    if not found:
        return ""
    nm = max(found, key=lambda n: (n.score, n.matched_literals))
    return "" if not nm.matched and nm.missing else ": " + nm.detail()


@dataclass(frozen=True)
class RecordExplanation:
    """One input record: the events rules extracted from it, or the rules that came closest."""

    record: Mapping[str, Any]      # the record (RECORD_SCHEMA columns)
    events: tuple[Mapping[str, Any], ...]            # events that start at (or, with a focus line, cover) it
    near: tuple[NearMiss, ...]
    covered_by: tuple[Mapping[str, Any], ...] = ()   # multi-record events this record is a later part of
    timed_out: tuple[str, ...] = ()  # `engine: regex` rules whose search timed out on this record
    not_applied: tuple[str, ...] = ()  # ... or that were not applied to it: their time budget was spent

    @property
    def timeout_notes(self) -> tuple[str, ...]:
        """One sentence per rule that timed out on this record or was not applied to it."""
        timeout = REGEX_TIMEOUT
        fix = "; simplify its pattern (nested or overlapping repeats such as `(a|aa)+` backtrack catastrophically)"
        return (tuple(f"timed out: {r}: its pattern ran for more than {timeout:g} s on this message and was "
                      f"stopped, so the rule cannot say whether it matches{fix}" for r in self.timed_out)
                + tuple(f"timed out: {r}: not applied to this message: it had spent its time budget on earlier "
                        f"messages of this source{fix}" for r in self.not_applied))

    @property
    def verdict(self) -> str:
        """`match`, `near_miss` (some rule came close, or matched but did not apply) or `no_match`."""
        if self.events or self.covered_by:
            return "match"
        return "near_miss" if self.near else "no_match"


@dataclass(frozen=True)
class Explanation:
    records: tuple[RecordExplanation, ...]

    @property
    def matched(self) -> bool:
        return any(r.events for r in self.records)


def nearest(rules: RuleSet, record: Mapping[str, Any], top: int = 3, skip: Iterable[str] = ()) -> tuple[NearMiss, ...]:
    """The rules whose patterns came closest to the record's message: those that match but did not apply
    first, then near misses above the threshold, best first. Rules in `skip` (they timed out) are not tried."""
    scored: list[NearMiss] = []
    skipped = set(skip)
    for rule in rules.rules:
        if rule.id in skipped:
            continue
        nm = closest(rule, record)
        if nm is not None and (nm.reason or (nm.score >= NEAR_RATIO and nm.matched_literals >= NEAR_MIN_LITERALS)):
            scored.append(nm)
    scored.sort(key=lambda n: (bool(n.reason), n.score, n.matched_literals), reverse=True)
    return tuple(scored[:top])


def explain(records: pl.DataFrame, rules: RuleSet, *, focus_line: int | None = None, top: int = 3) -> Explanation:
    """Match the records; per record (only the one holding `focus_line` when given) the events it produced,
    or when none, the rules that came closest and where their patterns stopped matching. Without a focus
    line an event is listed once, at the first record it spans; later records it spans are `covered_by` it.
    Rules whose pattern timed out on a record (or had spent their time budget) are named in `timed_out` /
    `not_applied`, never hidden."""
    budget = RegexBudget()
    events = match_records(records, rules, budget=budget)
    out: list[RecordExplanation] = []
    ev_rows = list(events.iter_rows(named=True))
    listed: set[int] = set()
    for rec in records.iter_rows(named=True):
        a = rec["line"]
        b = rec["line_end"] if rec.get("line_end") is not None else a
        if focus_line is not None and not (a <= focus_line <= b):
            continue
        span = [i for i, e in enumerate(ev_rows) if e["path"] == rec["path"] and e["line"] <= b and e["line_end"] >= a]
        if focus_line is not None:
            mine, covered = span, []
        else:
            mine = [i for i in span if i not in listed]
            covered = [i for i in span if i in listed]
            listed.update(mine)
        evs = tuple(ev_rows[i] for i in mine)
        cov = tuple(ev_rows[i] for i in covered)
        slow = budget.timed_out_on(rec["path"], a, b)
        unapplied = tuple(r for r in budget.skipped_on(rec["path"], a, b) if r not in slow)
        near = () if evs or cov else nearest(rules, rec, top, skip=(*slow, *unapplied))
        out.append(RecordExplanation(rec, evs, near, cov, slow, unapplied))
    return Explanation(tuple(out))

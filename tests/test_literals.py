"""Literal derivation (forensics/literals.py): the prefilter's text, one of which every match must contain.

A wrong literal loses events silently (the prefilter drops the record before the pattern sees it), so besides
worked cases the derivation is checked against matches Hypothesis generates, for every built-in pattern and
for random patterns."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.literals import MAX_SET, SEARCH_GROUP, _sre_source, derive_literals, search_groups
from forensics.rulepacks import load_rules


@pytest.mark.parametrize("pattern,expected", [
    # a run goes on across a group's end and a group's start
    (r"(?m)^(?P<unit>[^\s:]+\.service): Deactivated successfully\.", (".service: Deactivated successfully.",)),
    (r"Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)", ("Killed process ",)),
    (r"(?P<state>Started|Starting) (?:(?P<unit>\S+) - )?", ("Started ", "Starting ")),
    # an alternation of exact strings multiplies the run; a short class too
    (r"(?:Out of memory|Memory cgroup out of memory): Killed", ("Out of memory: Killed",
                                                               "Memory cgroup out of memory: Killed")),
    (r"[Ss]ession \d+ of", ("Session ", "session ")),
    (r"(?:ab){2}cd", ("ababcd",)),
    # alternatives that are not exact: each must give a literal, the prefix they share is not enough alone
    (r"(?:Main process \d+|Control process \w+) exited", ("Main process ", "Control process ")),
    (r"(?:foo\d|\d+) exited now", (" exited now",)),
    # a repeat of at least one keeps its prefix and suffix; an optional one ends the run
    (r"ERROR(?:: \w+)+ done", ("ERROR: ",)),
    (r"ab(?:cd)?efgh", ("efgh",)),
    # look-arounds and case-insensitive groups end a run; zero-width anchors do not
    (r"foo(?=bar)barbaz", ("barbaz",)),
    (r"(?i:quux)literal text", ("literal text",)),
    (r"(?m)^Linux version \S+$", ("Linux version ",)),
    (r"(?i)watchdog timeout", ("watchdog timeout",)),
    (r"\d+ \w+", None),
    (r"ab\d+cd", None),                      # nothing of MIN_LITERAL characters
])
def test_derive_literals(pattern: str, expected: tuple[str, ...] | None) -> None:
    got = derive_literals(pattern)
    assert (got[0] if got else None) == expected
    if got and pattern.startswith("(?i)"):
        assert got[1] is True


def test_a_product_past_the_set_limit_ends_the_run() -> None:
    pattern = "[ab][cd][ef][gh][ij] literal"      # 32 strings > MAX_SET
    assert 2 ** 5 > MAX_SET
    lits, _ = derive_literals(pattern)
    assert all(len(x) >= 4 for x in lits)
    assert len(lits) <= MAX_SET


def _holds(lits: tuple[str, ...], ignore_case: bool, text: str) -> bool:
    return any(x in (text.lower() if ignore_case else text) for x in lits)


def _builtin_patterns() -> list[tuple[str, str, tuple[str, ...], bool]]:
    out = []
    for r in load_rules().rules:
        pats = [(r.id, r.pattern)] + [(f"{r.id} context {j}", c.pattern) for j, c in enumerate(r.context)]
        for name, p in pats:
            got = derive_literals(p)
            if got:
                out.append((name, p, *got))
    return out


_BUILTIN = _builtin_patterns()


@pytest.mark.parametrize("name,pattern,lits,ignore_case", _BUILTIN, ids=[b[0] for b in _BUILTIN])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_match_of_a_builtin_pattern_holds_a_derived_literal(name: str, pattern: str, lits: tuple[str, ...],
                                                                 ignore_case: bool, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(re.compile(_sre_source(pattern)), fullmatch=False))
    assert _holds(lits, ignore_case, text), (name, lits, text)


# random patterns: literals, short and long classes, groups, alternations, repeats, anchors and look-arounds
_atoms = st.one_of(
    st.text(alphabet="abcXY :.", min_size=1, max_size=6).map(re.escape),
    st.sampled_from([r"\d", r"\w+", r"[ab]", r"[^:]", r"\S*", "[a-f]", "^", "$", r"\b"]),
)


def _repeat(t: tuple[str, str]) -> str:
    """`(?:x)q`. An unbounded repeat of a part that repeats without bound (`(?:\\S*)+`) becomes the bounded
    repeat of the same kind (`*` -> `?`: optional; `+` -> `{1,3}`: required), which asks the same of the literals
    but does not make Python's `re` backtrack exponentially in hypothesis' filter of the drawn texts (a run
    stalled for minutes on one)."""
    x, q = t
    if q in ("*", "+", "+?") and ("*" in x or "+" in x):
        q = "?" if q == "*" else "{1,3}"
    return f"(?:{x}){q}"


def _compose(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.lists(inner, min_size=2, max_size=4).map("".join),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(?:" + "|".join(xs) + ")"),
        inner.map(lambda x: f"(?P<g>{x})" if "(?P<g>" not in x else f"({x})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "+?"])).map(_repeat),
        inner.map(lambda x: f"(?={x})"),
        inner.map(lambda x: f"(?i:{x})"),
    )


_patterns = st.recursive(_atoms, _compose, max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), pattern=_patterns)
def test_every_match_of_a_random_pattern_holds_a_derived_literal(data: st.DataObject, pattern: str) -> None:
    try:
        rx = re.compile(pattern)
    except re.error:
        return
    got = derive_literals(pattern)
    if got is None:
        return
    lits, ignore_case = got
    for _ in range(5):
        text = data.draw(st.from_regex(rx, fullmatch=True))
        assert _holds(lits, ignore_case, text), (pattern, lits, text)


def test_search_groups_drop_literals_holding_another_and_split_in_sorted_order() -> None:
    lits = ("Started ", "Started foo", "Starting ", "CUDA error: ", "CUDA error: out of memory", "abc", "xabcx")
    assert search_groups(lits) == (("CUDA error: ", "Started ", "Starting ", "abc"),)
    many = tuple(f"lit{i:05d}" for i in range(SEARCH_GROUP * 2 + 1))  # none holds another
    groups = search_groups(many)
    assert len(groups) == 3 and {len(g) for g in groups} <= {len(many) // 3, len(many) // 3 + 1}  # fewest, balanced
    assert [x for g in groups for x in g] == sorted(many)
    assert search_groups(()) == ()


def test_builtin_literals_fit_in_the_fewest_search_groups() -> None:
    """The built-in packs' literals: no group past the limit, none to spare (one alternation today)."""
    lits = load_rules().literals(False)
    groups = search_groups(lits)
    kept = sum(len(g) for g in groups)
    assert all(len(g) <= SEARCH_GROUP for g in groups) and len(groups) == -(-kept // SEARCH_GROUP)
    assert kept < len(lits)    # some built-in literals hold others (`CUDA error: out of memory`)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=12), st.text(alphabet="abc", max_size=20),
       st.integers(1, 5))
def test_a_text_holds_a_grouped_literal_exactly_when_it_holds_a_literal(lits: list[str], text: str, size: int) -> None:
    import forensics.literals as literals

    old = literals.SEARCH_GROUP
    literals.SEARCH_GROUP = size
    try:
        groups = search_groups(tuple(lits))
    finally:
        literals.SEARCH_GROUP = old
    assert all(len(g) <= size for g in groups)
    assert any(x in text for x in lits) == any(x in text for g in groups for x in g)

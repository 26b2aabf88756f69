"""The literals a regex needs: text one of which every match of the pattern contains, for the prefilter.

A pattern is read with Python's own regex parser (`re._parser`) and each node is summarised by what it tells of
the text it matches (`_Lits`): the strings it always matches exactly, else the strings its matches start and end
with and the best set found inside it. A concatenation joins the exact strings of its items, and an item's
prefix to the run before it and its suffix to the run after, so a literal runs across group boundaries:
`(?P<unit>[^:]+\\.service): Deactivated` needs `.service: Deactivated`, not just `: Deactivated`. Sets are
kept small (`MAX_SET` strings), so a short class like `[Ss]` multiplies a run rather than ending it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

MIN_LITERAL = 4          # shortest literal derived from a pattern that is worth prefiltering on
MAX_SET = 16             # most strings a literal set holds (a larger product ends the run instead)
MAX_CLASS = 4            # largest character class taken as a set of literals (`[Ss]`, `[-_]`)

Strings = tuple[str, ...]


@dataclass(frozen=True)
class _Lits:
    """What a regex node says of its matches. `exact`: each match is one of these strings. Otherwise `prefix`
    / `suffix`: each match starts / ends with one of these (() unknown), and `best`: the best set found inside,
    one of which each match contains (None: none)."""

    exact: Strings | None = None
    prefix: Strings = ()
    suffix: Strings = ()
    best: Strings | None = None


_OPAQUE = _Lits()
_ZERO_WIDTH = _Lits(exact=("",))


def _known(s: Strings | None) -> Strings:
    """`s`, or () when it says nothing (empty, or holding the empty string)."""
    return s if s and "" not in s else ()


def _score(s: Strings | None) -> tuple[int, int]:
    """Longer shortest string first, then fewer strings."""
    s = _known(s)
    return (min(len(x) for x in s), -len(s)) if s else (-1, 0)


def _better(a: Strings | None, b: Strings | None) -> Strings | None:
    return a if _score(a) > _score(b) else b


def _cross(a: Strings, b: Strings) -> Strings | None:
    """Every string of `a` followed by every string of `b` (None past MAX_SET)."""
    if len(a) * len(b) > MAX_SET:
        return None
    return tuple(dict.fromkeys(x + y for x, y in product(a, b)))


def _sequence(items) -> _Lits:  # items: a parsed (sub)pattern's (op, av) list
    run: Strings = ("",)                 # the exact strings the current run of items may be
    prefix: Strings | None = None        # set at the first item that is not exact
    best: Strings | None = None
    for op, av in items:
        node = _node(op, av)
        if node.exact is not None:
            joined = _cross(run, node.exact)
            if joined is not None:
                run = joined
                continue
            best = _better(run, best)
            if prefix is None:
                prefix = run
            run = node.exact
            continue
        head = (_cross(run, node.prefix) if node.prefix else None) or run
        best = _better(_better(head, node.best), best)
        if prefix is None:
            prefix = head
        run = node.suffix or ("",)
    if prefix is None:
        return _Lits(exact=run)
    best = _better(run, best)
    return _Lits(prefix=_known(prefix), suffix=_known(run), best=best)


def _branch(alternatives) -> _Lits:
    nodes = [_sequence(a.data) for a in alternatives]
    if all(n.exact is not None for n in nodes):
        every = tuple(dict.fromkeys(x for n in nodes for x in n.exact))
        if len(every) <= MAX_SET:
            return _Lits(exact=every)
        return _OPAQUE

    def union(parts: list[Strings | None]) -> Strings:
        if not all(_known(p) for p in parts):
            return ()
        out = tuple(dict.fromkeys(x for p in parts for x in p))
        return out if len(out) <= MAX_SET else ()

    return _Lits(prefix=union([n.exact or n.prefix for n in nodes]),
                 suffix=union([n.exact or n.suffix for n in nodes]),
                 best=union([n.exact or n.best for n in nodes]) or None)


def _repeat(lo: int, hi: int, sub) -> _Lits:
    if lo < 1:
        return _OPAQUE
    node = _sequence(sub.data)
    if node.exact is not None:
        if lo == hi:
            rep: Strings | None = ("",)
            for _ in range(lo):
                rep = _cross(rep, node.exact) if rep is not None else None
            if rep is not None:
                return _Lits(exact=rep)
        return _Lits(prefix=_known(node.exact), suffix=_known(node.exact), best=node.exact)
    return _Lits(prefix=node.prefix, suffix=node.suffix, best=node.best)


def _node(op, av) -> _Lits:
    import re._constants as C

    if op is C.LITERAL:
        return _Lits(exact=(chr(av),))
    if op is C.IN:
        if 0 < len(av) <= MAX_CLASS and all(o is C.LITERAL for o, _ in av):
            return _Lits(exact=tuple(chr(a) for _, a in av))
        return _OPAQUE
    if op is C.SUBPATTERN:
        _group, add_flags, _del_flags, sub = av
        return _OPAQUE if add_flags & re.IGNORECASE else _sequence(sub.data)
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None)):
        lo, hi, sub = av
        return _repeat(lo, hi, sub)
    if op is C.BRANCH:
        return _branch(av[1])
    if op is C.ATOMIC_GROUP:
        return _sequence(av.data)
    if op is C.AT:
        return _ZERO_WIDTH            # ^ $ \b: zero-width, the text on either side is adjacent
    return _OPAQUE                    # look-arounds, backreferences, any other class or category


def _sre_source(pattern: str) -> str:
    """Rust/`regex` syntax -> syntax Python's sre parser reads (for literal derivation only)."""
    return pattern.replace(r"\z", r"\Z").replace("(?<", "(?P<").replace("(?P<=", "(?<=").replace("(?P<!", "(?<!")


def derive_literals(pattern: str) -> tuple[Strings, bool] | None:
    """Literals one of which every match must contain (the best such set), and whether they are case-
    insensitive. None when the pattern has no usable required literal (each at least MIN_LITERAL long)."""
    import re._parser as P

    try:
        parsed = P.parse(_sre_source(pattern))
    except Exception:  # noqa: BLE001 - the regex module accepts things sre does not
        return None
    ignore_case = bool(parsed.state.flags & re.IGNORECASE)
    node = _sequence(parsed.data)
    best = _known(node.exact if node.exact is not None else node.best)
    if not best or min(len(x) for x in best) < MIN_LITERAL:
        return None
    if ignore_case:
        best = tuple(dict.fromkeys(x.lower() for x in best))
    return best, ignore_case


SEARCH_GROUP = 1024      # most literals one alternation holds (a bound on the compiled regex's size)


def search_groups(literals: Strings) -> tuple[Strings, ...]:
    """`literals` as the fewest groups of at most `SEARCH_GROUP` that a text holds one of exactly when it holds one
    of `literals`: a literal holding another is dropped (the shorter one finds the same texts), and the rest are
    split in sorted order. Each group is one pass over the messages, and the regex engine searches one
    alternation of many literals faster than several of fewer: on the 1.0 M journal and SGLang records of the
    256 MiB corpus, the 134 built-in literals took 0.39-0.48 s in one alternation and 0.78-0.86 s in three of
    45 (groups of at most 64, the limit of the engine's SIMD search, measured faster in an earlier session, with
    fewer literals), and 534 literals 0.51-0.60 s in one, 1.7-1.9 s in nine."""
    kept: list[str] = []
    for x in sorted(set(literals), key=lambda s: (len(s), s)):
        if not any(k in x for k in kept):
            kept.append(x)
    kept.sort()
    n = -(-len(kept) // SEARCH_GROUP)
    return tuple(tuple(kept[i * len(kept) // n:(i + 1) * len(kept) // n]) for i in range(n))

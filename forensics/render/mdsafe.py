"""Markdown that cannot be turned into links, images or HTML by the text it carries.

Every value a template prints goes through `inline()` (the Markdown environment's `finalize`),
unless a filter already made it safe (`Md`). The rules:

- log text shown as a block goes in a fence longer than any backtick run inside it (`fence`);
- inline text has every Markdown-active character backslash-escaped, and every word that a
  renderer would turn into a link or mention (`://`, `www.`, `@`, `#123`) is put in a code span,
  because GitHub's autolinks ignore backslashes but never look inside code;
- code spans never contain `|`, so they are safe in table cells and outside them alike;
- control characters and bidirectional overrides are shown as `\\xNN` / `\\u202e`, never emitted.
"""

from __future__ import annotations

import re

__all__ = ["Md", "inline", "code", "command", "step", "prose", "fence", "visible", "bold"]


class Md(str):
    """A string that is already safe Markdown (a filter's output); printed as is."""

    __slots__ = ()


# C0 controls except TAB and LF, DEL, C1 controls, and the Unicode bidi controls (Trojan Source).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ACTIVE = re.compile(r"([\\`*_\[\]<>!|~&$#{}])")
# a word that starts like a URI (`scheme:` and the start of a body: `javascript:alert`, `mailto:x`, `urn:isbn`) is
# put in code too; a word ending in a colon before punctuation (`output:),`) is prose
_LINKISH = re.compile(r"://|\bwww\.|@|#\d|^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9/?%]")
_BACKTICKS = re.compile(r"`+")
# where prose opens and closes its code spans: `(`see `x`, ...)`; any other backtick is shown as text
_OPENS_AFTER = frozenset(" \t([{\"'/")
_CLOSES_BEFORE = frozenset(" \t.,;:!?)]}\"'/-")
# what would start a list, a heading underline or a thematic break at the start of a line
_LEADING_BLOCK = re.compile(r"^( *)(?:(\d{1,9})([.)])(?=\s|$)|([-+=*])(?=\s|$|[-=*\s]*$))")


def _show(ch: re.Match[str]) -> str:
    c = ord(ch.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """`text` with CR/CRLF turned into LF and every invisible control character made visible."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _INVISIBLE.sub(_show, text)


def _escape_word(word: str) -> str:
    return _ACTIVE.sub(r"\\\1", word)


def _code_span(text: str) -> str:
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _one_line(value: object) -> str:
    return " ".join(visible(str(value)).split("\n"))


def code(value: object) -> Md:
    """`value` as inline code; `|` is kept outside the spans (escaped) so tables stay whole."""
    text = _one_line(value)
    if text == "":
        return Md("")
    if text.strip() == "":
        return Md(_code_span(text))
    parts = text.split("|")
    return Md("\\|".join(_code_span(p) if p else "" for p in parts))


def command(value: object) -> Md:
    """`value` as one inline code span, `|` included: a command to copy from a list item or a paragraph (in a table
    cell use `code`, which keeps `|` outside the spans)."""
    text = _one_line(value)
    return Md(_code_span(text)) if text else Md("")


def step(value: object) -> Md:
    """A next step: a bare command (the rules' `next_steps`) as one code span (`command`); a sentence that marks
    its own commands with backticks (a fixture's or a user template's advice) as `prose`."""
    return prose(value) if "`" in str(value) else command(value)


def inline(value: object) -> Md:
    """Plain text as inert inline Markdown (one line)."""
    if isinstance(value, Md):
        return value
    if value is None:
        return Md("")
    text = " ".join(visible(str(value)).replace("\t", " ").split("\n"))
    out: list[str] = []
    for word in re.split(r"( +)", text):
        if not word or word.startswith(" "):
            out.append(word)
        elif _LINKISH.search(word):
            out.append(str(code(word)))
        else:
            out.append(_escape_word(word))
    result = "".join(out)
    lead = _LEADING_BLOCK.match(result)
    if lead:
        if lead.group(2) is not None:
            result = f"{lead.group(1)}{lead.group(2)}\\{lead.group(3)}{result[lead.end():]}"
        else:
            result = f"{lead.group(1)}\\{lead.group(4)}{result[lead.end():]}"
    return Md(result)


def bold(value: object) -> Md:
    """`**value**`, the value escaped."""
    text = inline(value)
    return Md(f"**{text}**") if text.strip() else Md("")


def prose_code_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of the code spans a rule or correlation text writes: a backtick run that opens (at the
    start, or after a space or an opening bracket or quote, and before a non-space) followed by the very next
    backtick run, of the same length, where it closes (after a non-space, and at the end or before a space or
    punctuation). Log values filled into the text cannot pair with the text's own spans this way: a stray
    run (``` ``` ```, a lone backtick) opens nothing or closes nothing, and is shown as text."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    spans: list[tuple[int, int]] = []
    i = 0
    while i + 1 < len(runs):
        (a0, a1), (b0, b1) = runs[i], runs[i + 1]
        opens = (a0 == 0 or text[a0 - 1] in _OPENS_AFTER) and not text[a1].isspace()
        closes = not text[b0 - 1].isspace() and (b1 == len(text) or text[b1] in _CLOSES_BEFORE)
        if opens and closes and a1 - a0 == b1 - b0:
            spans.append((a0, b1))
            i += 2
        else:
            i += 1
    return spans


def prose(value: object) -> Md:
    """Text written by a rule or by correlation, perhaps with log values filled in: its own backtick spans
    (`prose_code_spans`) stay code, everything else is `inline` (so a backtick from a log value is text)."""
    if isinstance(value, Md):
        return value
    if value is None:
        return Md("")
    text = " ".join(visible(str(value)).split("\n")).strip()
    out: list[str] = []
    pos = 0
    for start, end in prose_code_spans(text):
        out.append(_inline_keep_space(text[pos:start]))
        ticks = len(_BACKTICKS.match(text, start).group(0))
        inner = text[start + ticks:end - ticks]
        out.append(str(code(inner.strip() or inner)))
        pos = end
    out.append(_inline_keep_space(text[pos:]))
    joined = ""
    for piece in out:  # two code spans side by side would merge their backtick runs: keep them apart
        joined += ("\u200b" if joined.endswith("`") and piece.startswith("`") else "") + piece
    return Md(joined)


def _inline_keep_space(segment: str) -> str:
    """`inline` for a piece of prose between code spans: keeps its edge spaces."""
    return str(inline(segment)) if segment else ""


def fence(value: object, info: str = "") -> Md:
    """A fenced code block holding `value` verbatim, fenced longer than any backtick run in it."""
    text = visible("" if value is None else str(value))
    if text.endswith("\n"):
        text = text[:-1]
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    info = re.sub(r"[^A-Za-z0-9_+-]", "", info)
    return Md(f"{ticks}{info}\n{text}\n{ticks}")

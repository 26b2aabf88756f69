"""The incident report: golden files for the seed incident, and the properties every report keeps."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import check_golden
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from fixtures.incident_fixture import PAYLOAD, hostile_incident, seed_incident, seed_reader

from forensics.model import Evidence
from forensics.render import ReportOptions, render_report
from forensics.render.mdsafe import code, command, fence, inline, prose, step, visible

GOLDEN = Path(__file__).parent / "golden" / "report"
OPTS = ReportOptions(tz="Europe/Berlin", tool_version="0.0.0-test", source_reader=seed_reader,
                     rulepack_versions={"kernel": "1", "sglang": "1", "systemd": "1"})


@pytest.mark.parametrize("fmt,name", [("md", "seed.md"), ("html", "seed.html"), ("json", "seed.json")])
def test_seed_report_golden(fmt: str, name: str, update_golden: bool) -> None:
    check_golden(GOLDEN / name, render_report([seed_incident()], fmt, OPTS), update_golden)  # type: ignore[arg-type]


def test_seed_report_utc_golden(update_golden: bool) -> None:
    opts = replace(OPTS, tz="UTC", source_reader=None)
    check_golden(GOLDEN / "seed-utc-nocontext.md", render_report([seed_incident()], "md", opts), update_golden)


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_report_is_deterministic(fmt: str) -> None:
    a = render_report([seed_incident()], fmt, OPTS)  # type: ignore[arg-type]
    b = render_report([seed_incident()], fmt, OPTS)  # type: ignore[arg-type]
    assert a == b
    assert "Generated at" not in a and '"generated_at": null' in render_report([seed_incident()], "json", OPTS)


def test_generated_at_only_when_asked() -> None:
    text = render_report([seed_incident()], "md", replace(OPTS, generated_at="2025-05-26T09:00:00Z"))
    assert "Generated at 2025-05-26T09:00:00Z." in text


def test_seed_report_reaches_the_postmortem() -> None:
    """What the seeds' authors worked out by hand is in the report by itself."""
    md = render_report([seed_incident()], "md", OPTS)
    sections = re.findall(r"^## (.+)$", md, flags=re.M)
    assert sections == ["Summary", "Impact", "Timeline", "What the key lines reveal", "Analysis",
                        "Configuration at the time of failure", "Environment", "What the logs do not show",
                        "Recommended actions", "Appendix"]
    for needle in ("status=9/KILL", "Killed process 48213", "Failed to kill control group", "compute\\_120a",
                   "`--sampling-backend pytorch`", "0.90 x 96 GB = 86.4 GB", "9 min 31 s to load",
                   "after 36 s up", "Suppressed 1234 messages", "**Root cause (confirmed",
                   "journal-eagle3.log:156-157", "(x2)", "22:17:19 CEST", "≈20:17:19"):
        assert needle in md, needle
    # every cited line is in the appendix with its path:line and context
    assert "samples/incident/dmesg.log:3-7" in md and "> 6  [ 8120.114260] Out of memory" in md
    assert re.search(r"`journal-eagle3.log`: `[0-9a-f]{64}`", md)


def test_several_incidents_one_document() -> None:
    a = seed_incident()
    b = replace(seed_incident(), id="2025-05-25-dflash-train-other", headline="A second incident")
    md = render_report([a, b], "md", OPTS)
    assert md.startswith("# 2 incidents, 2025-05-25\n")
    assert re.findall(r"^## \d\. ", md, flags=re.M) == ["## 1. ", "## 2. "]
    assert md.count("### Summary") == 2
    html = render_report([a, b], "html", OPTS)
    assert html.count("<svg") == 2
    js = render_report([a, b], "json", OPTS)
    assert js.count('"incident": {') == 2


def test_no_conclusion_no_events() -> None:
    inc = replace(seed_incident(), root_cause=None, conclusions=(), events=(), symptoms=(), configs=(), gaps=(),
                  environment={})
    for fmt in ("md", "html", "json"):
        out = render_report([inc], fmt, OPTS)  # type: ignore[arg-type]
        assert out
    md = render_report([inc], "md", OPTS)
    assert "**Root cause: not determined.**" in md


# ----------------------------------------------------------------------------- inert log text

def _texts(tokens: list) -> list[str]:  # noqa: ANN001
    out = []
    for t in tokens:
        if t.type == "text":
            out.append(t.content)
        if t.children:
            out.extend(_texts(t.children))
    return out


def test_markdown_payload_is_inert() -> None:
    md = render_report([hostile_incident()], "md", replace(OPTS, max_chars=0))
    # the most permissive reading: raw HTML allowed, links and images on
    permissive = MarkdownIt("commonmark", {"html": True}).enable("table")
    html = permissive.render(md)
    for bad in ("<script", "<img", "<a ", "<b>", "<iframe", "<h1>heading", "<em>", "\x1b", "\u202e"):
        assert bad not in html, bad
    # nothing GitHub would autolink or turn into a mention sits in plain text
    for text in _texts(permissive.parse(md)):
        assert "://" not in text and "www." not in text and "@" not in text, text
    # and the payload is still there to read
    assert "<script>alert(1)</script>" in html.replace("&lt;", "<").replace("&gt;", ">")
    assert "\\x1b[31mred\\u202eevil" in md


def test_markdown_fences_are_longer_than_backtick_runs() -> None:
    md = render_report([hostile_incident()], "md", replace(OPTS, max_chars=0))
    assert "`````text\n" in md          # the payload holds a run of four backticks
    tokens = MarkdownIt("commonmark").parse(md)
    fences = [t for t in tokens if t.type == "fence" and "onerror" in t.content]
    assert fences and all("<iframe" in t.content for t in fences if "iframe" in t.content)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def html_tags(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_html_payload_is_escaped() -> None:
    html = render_report([hostile_incident()], "html", OPTS)
    tags = html_tags(html)
    names = {t for t, _ in tags}
    assert not names & {"script", "img", "iframe", "a", "b", "link", "object", "embed", "base", "form", "i"}
    for tag, attrs in tags:
        for name, _value in attrs:
            assert not name.startswith("on") and name not in ("src", "href", "xlink:href"), (tag, name)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "\x1b" not in html and "\u202e" not in html


def test_mdsafe_units() -> None:
    assert inline("a|b [x](y) <z> *q* _u_") == "a\\|b \\[x\\](y) \\<z\\> \\*q\\* \\_u\\_"
    assert inline("1. not a list") == "1\\. not a list" and inline("0.90 x") == "0.90 x"
    assert inline("see http://x.example/a") == "see `http://x.example/a`"
    # a word that starts like a URI is code; a word ending in a colon before punctuation is prose (a filled-in
    # exception message `Ninja build failed. Ninja output:` followed by the template's `),`)
    assert inline("javascript:alert(1) mailto:x urn:isbn:1") == "`javascript:alert(1)` `mailto:x` `urn:isbn:1`"
    assert inline("(Ninja output:), raised") == "(Ninja output:), raised"
    assert code("a|b") == "`a`\\|`b`" and code("``x") == "``` ``x ```"
    # a command in a list item is one span, `|` and all, so it copies as it runs; newlines become spaces
    assert command('free -g; cat /proc/meminfo | head -20') == "`free -g; cat /proc/meminfo | head -20`"
    assert command("grep `x`\nnext") == "``grep `x` next``" and command("") == ""
    assert step("free -g | head") == "`free -g | head`"
    assert step("Raise `RateLimitBurst=` so lines are kept.") == "Raise `RateLimitBurst=` so lines are kept."
    assert prose("use `--x` now") == "use `--x` now"
    assert fence("a\n````\nb") == "`````\na\n````\nb\n`````"
    assert prose("a `x`, (`y`) and \"`z`\": `w`.") == "a `x`, (`y`) and \"`z`\": `w`."
    assert prose("tick ` and ``` runs") == "tick \\` and \\`\\`\\` runs"


RULE_TEXT = ("An exception ({value}) was raised. `origin` is the log line that introduced it (a worker's "
             "`Scheduler hit an exception:`, or uvicorn's `Exception in ASGI application`) {value}.")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="`~*_[]()<>!|#&@:/.w -", max_size=40))
def test_log_values_in_rule_text_leave_its_code_spans_whole(value: str) -> None:
    """A log value filled into a rule's text (twice, anywhere) never pairs with the text's own code spans."""
    html = MarkdownIt("commonmark").render(prose(RULE_TEXT.format(value=value)))
    for span in ("origin", "Scheduler hit an exception:", "Exception in ASGI application"):
        assert f"<code>{span}</code>" in html, (value, html)
    outside = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    assert "\\`" not in outside and "ASGI" not in outside and "origin" not in outside, (value, html)


# ----------------------------------------------------------------------------- size limit

def _big_incident(n: int = 160) -> tuple:
    inc = seed_incident()
    root = inc.root_cause
    assert root is not None
    extra = tuple(Evidence(path=f"samples/big/part{i:03d}.log", line=10 + i, line_end=10 + i, ts=None,
                           ts_source="none", text=f"line {i} " + "x" * 600, note=f"filler {i}") for i in range(n))
    root = replace(root, evidence_for=(*root.evidence_for, *extra))
    return replace(inc, root_cause=root, conclusions=(root, *inc.conclusions[1:])), n


def test_over_the_limit_the_appendix_is_trimmed_with_a_note() -> None:
    inc, n = _big_incident()
    opts = replace(OPTS, source_reader=None)
    full = render_report([inc], "md", replace(opts, max_chars=0))
    assert len(full) > 65_536 and "trimmed to fit" not in full and f"line {n - 1} " in full
    trimmed = render_report([inc], "md", opts)
    assert len(trimmed) <= 65_536
    assert "cited excerpts shown: the report is trimmed to fit 65,536 characters" in trimmed
    assert "--max-chars 0" in trimmed
    # the command is a code span, not backticks escaped into text
    assert f"run `forensics report --incident {inc.id} --max-chars 0` (or use `--format html`)" in trimmed
    assert f"line {n - 1} " not in trimmed
    # everything before the appendix is whole
    assert trimmed.split("## Appendix")[0] == full.split("## Appendix")[0]


def test_hard_cut_closes_fences() -> None:
    inc, _ = _big_incident(10)
    text = render_report([inc], "md", replace(OPTS, max_chars=4_000))
    assert len(text) <= 4_000
    assert "the report is cut here" in text and "--max-chars 0" in text
    assert "the rest left out to fit 4,000 characters. For everything, run" in text  # one sentence, not two joined
    opened = 0
    for line in text.split("\n"):
        if re.match(r"^`{3,}", line):
            opened ^= 1
    assert opened == 0


def test_a_hard_cut_reuses_the_bare_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """When even the report without excerpts, rows or key lines is over the limit, it is cut from the render the
    trimming made of it (no render stopped at the limit itself), and the cut is the one that render would give."""
    import forensics.render as render_pkg
    from forensics.render import trim

    inc, _ = _big_incident(10)
    caps: list[int] = []
    checked: list[bool] = []

    def fit(view, render, limit):  # noqa: ANN001, ANN202
        def counted(v, cap):  # noqa: ANN001, ANN202
            caps.append(cap)
            return render(v, cap)

        out = trim.fit(view, counted, limit)
        note = trim.trim_note(view, limit, "Trimmed: the report is cut here and the rest left out")
        checked.append(out == trim._hard_cut(render(trim._limit(view, 0, 0, limit), limit)[0], limit, note))
        return out

    monkeypatch.setattr(render_pkg, "fit", fit)
    text = render_report([inc], "md", replace(OPTS, max_chars=4_000))
    assert "the report is cut here" in text and len(text) <= 4_000
    assert checked == [True]
    assert caps and 4_000 not in caps


def test_user_template_runs_in_a_sandbox(tmp_path: Path) -> None:
    (tmp_path / "partials").mkdir()
    (tmp_path / "partials" / "summary.md.j2").write_text("{{ h }} My summary\n\n{{ iv.headline }}\n")
    md = render_report([seed_incident()], "md", replace(OPTS, template_dir=tmp_path))
    assert "## My summary" in md and "## Timeline" in md
    (tmp_path / "report.md.j2").write_text("{{ report.__class__.__mro__ }}")
    with pytest.raises(Exception) as e:
        render_report([seed_incident()], "md", replace(OPTS, template_dir=tmp_path))
    assert "mro" not in str(e.value) or "undefined" in str(e.value).lower()


def test_payload_in_user_template_is_still_escaped(tmp_path: Path) -> None:
    (tmp_path / "report.md.j2").write_text("{% for iv in report.incidents %}{{ iv.headline }}{% endfor %}\n")
    md = render_report([hostile_incident()], "md", replace(OPTS, template_dir=tmp_path))
    assert "<script>" not in md and "\\<script\\>" in md
    assert PAYLOAD  # used


def test_a_huge_timeline_is_trimmed_before_the_analysis() -> None:
    inc = seed_incident()
    base = inc.events[0]
    noise = tuple(replace(base, id=f"{base.id}:{i}", kind="decode_stats", rule=f"sglang.decode_{i % 7}",
                          severity="info", role="context", line=1000 + i, line_end=1000 + i,
                          ts=f"2025-05-25T19:{i // 60 % 60:02d}:{i % 60:02d}.000000Z", message=f"decode batch {i}",
                          title=f"decode batch {i}", explain=f"noise {i}") for i in range(3000))
    inc = replace(inc, events=tuple(sorted((*inc.events, *noise), key=lambda e: (e.ts or "", e.path, e.line))))
    text = render_report([inc], "md", OPTS)
    assert len(text) <= 65_536
    for section in ("## Analysis", "## Recommended actions", "## What the logs do not show"):
        assert section in text
    assert "more context row" in text and "**root cause**" in text
    assert "| ≈20:17:18.526 |" in text      # the root cause row survives


def _walk(tokens: list) -> list:  # noqa: ANN001
    out = []
    for t in tokens:
        out.append(t)
        if t.children:
            out.extend(_walk(t.children))
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200)
       | st.text(alphabet="`*_[]()<>!|#&@:/.w-=+~$\\ \n\t1aZ", max_size=120))
def test_escaped_text_never_becomes_markup(text: str) -> None:
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    for src in (f"x {inline(text)} y", f"| a |\n|---|\n| {inline(text)} |", f"- {prose(text)}",
                f"{inline(text)}\n"):
        for t in _walk(parser.parse(src)):
            assert t.type not in ("link_open", "image", "html_inline", "html_block", "heading_open",
                                  "blockquote_open", "hr", "s_open"), (src, t.type)
            if t.type == "text":
                assert "://" not in t.content and "www." not in t.content and "@" not in t.content, src
    tokens = parser.parse(fence(text))
    assert [t.type for t in tokens] == ["fence"]
    body = visible(text)
    body = body[:-1] if body.endswith("\n") else body
    assert tokens[0].content == body + "\n"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=60), st.integers(0, 20_000),
       st.booleans(), st.booleans())
def test_the_largest_fitting_n_is_bisections_in_fewer_renders(steps: list[int], limit: int, hint: bool,
                                                              stops: bool) -> None:
    """_largest finds what bisection finds (the largest n that fits, lengths growing with n), within twice its
    renders, and in a few when the length grows evenly; also when a render stops early past twice the limit
    (it tells a lower bound of the length, not the length)."""
    from forensics.render.trim import _largest

    lengths = [sum(steps[:i + 1]) for i in range(len(steps))]
    hi = len(lengths) - 2
    fits = [n for n in range(0, hi + 1) if lengths[n] <= limit]
    calls: list[int] = []

    def render(n: int) -> tuple[str, bool]:
        calls.append(n)
        if stops and lengths[n] > 2 * limit:
            return "x" * (2 * limit + 1), False
        return "x" * lengths[n], True

    got = _largest(0, hi, render, limit, lengths[-1] if hint else None)
    assert (len(got) if got is not None else None) == (lengths[max(fits)] if fits else None)
    bisection = max(1, (max(hi, 0) + 1).bit_length() + 1)
    assert len(calls) <= 2 * bisection
    even = _largest(0, 9_999, lambda n: ("y" * (100 + 10 * n), True), 50_000, 100 + 10 * 10_000)
    assert even is not None and len(even) == 100 + 10 * 4_990


def test_even_growth_takes_a_few_renders() -> None:
    from forensics.render.trim import _largest

    calls: list[int] = []

    def render(n: int) -> tuple[str, bool]:
        calls.append(n)
        return "y" * (1000 + 37 * n), True

    got = _largest(0, 999, render, 20_000, 1000 + 37 * 1000)
    assert got is not None and len(got) == 1000 + 37 * ((20_000 - 1000) // 37)
    assert len(calls) <= 4, calls


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "  ", "# Head", "## Sub", "text", "| a | b |", "| c | d |", "```",
                                           "~~~", "code  ", "- item", "\t"]),
                          st.sampled_from(["\n", "", "\n\n"])), max_size=40),
       st.integers(1, 400))
@example(parts=[("text", "\n\n")], cap=5)   # a blank line at the end of what came so far may yet be dropped
def test_a_render_stopped_early_is_the_tidied_whole_or_longer(parts: list, cap: int) -> None:
    """render_markdown_upto gives the tidied text when it is at most `cap` long, and otherwise the tidied text or
    a start of it longer than `cap` (so a lower bound of its length), whatever the chunks the template yields
    (here: one per part)."""
    from jinja2 import DictLoader, Environment

    from forensics.render.markdown import render_markdown_upto, tidy

    text = "".join(a + b for a, b in parts)
    env = Environment(loader=DictLoader({"report.md.j2": "{% for p in report %}{{ p }}{% endfor %}"}))
    got, whole = render_markdown_upto([a + b for a, b in parts], env, cap)  # type: ignore[arg-type]
    want = tidy(text)
    if len(want) <= cap:
        assert (got, whole) == (want, True)
    elif whole:
        assert got == want
    else:
        assert want.startswith(got) and cap < len(got) <= len(want)


def test_the_compiled_templates_cache_is_only_a_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports are the same with Jinja's cache of compiled templates filled, broken, or absent."""
    from forensics.render import templates

    inc = seed_incident()
    monkeypatch.setattr(templates, "_BYTECODE", [None])
    want, want_html = render_report([inc], "md", OPTS), render_report([inc], "html", OPTS)
    monkeypatch.setattr(templates, "_BYTECODE", [templates._QuietCache(str(tmp_path))])
    assert render_report([inc], "md", OPTS) == want          # compiles and fills the cache
    files = list(tmp_path.iterdir())
    assert files
    assert render_report([inc], "md", OPTS) == want          # read back
    for f in files:
        f.write_bytes(b"not bytecode")
    assert render_report([inc], "md", OPTS) == want
    assert render_report([inc], "html", OPTS) == want_html


def test_a_dump_of_every_argument_shows_the_reviewed_ones_and_counts_the_rest() -> None:
    """A launch configuration read from a server's dump of every argument (`ServerArgs(...)`, vLLM's
    `Namespace(...)`) lists the defaults too: the table keeps the arguments with a review note and says how many
    others the quoted dump holds; the JSON report keeps them all. A command line's table is whole."""
    from forensics.model import Flag, ServerConfig

    inc = seed_incident()
    dump = "ServerArgs(model_path='/m', mem_fraction_static=0.9, ds_heavy_channel_num=32, page_size=1)"
    flags = (Flag("--model-path", "/m"), Flag("--mem-fraction-static", "0.9", "Aggressive."),
             Flag("--ds-heavy-channel-num", "32"), Flag("--page-size", "1"))
    cfg = ServerConfig(unit=inc.configs[0].unit, host=inc.configs[0].host, command=dump, flags=flags,
                       evidence=inc.configs[0].evidence)
    inc = replace(inc, configs=(cfg, *inc.configs[1:]))
    md = render_report([inc], "md", OPTS)
    section = md.split("## Configuration at the time of failure", 1)[1].split("\n## ", 1)[0]
    assert "| `--mem-fraction-static` | `0.9` | Aggressive. |" in section
    assert "`--ds-heavy-channel-num`" not in section and "`--page-size`" not in section
    assert ("The dump's other 3 arguments (a dump lists the defaults too) have no review note: they are in the dump "
            "above.") in section
    assert "| `--tp-size` |" in section   # the other unit's ExecStart: every flag
    js = render_report([inc], "json", OPTS)
    assert '"--ds-heavy-channel-num"' in js


def test_a_list_of_lines_is_one_code_span_per_item_in_html() -> None:
    # so that a table cell wraps between the items (a code span in a cell does not wrap: a unit stays whole)
    from forensics.render.html import markdown_to_html
    html = markdown_to_html("| a | b |\n|---|---|\n| `journal.log:10137648, 10137751-10137769, dmesg.log:12, ...` | "
                            "`x.service` |\n\n`--tp-size 8, --dp 2` and `journal.log:7`\n")
    assert ("<td><code>journal.log:10137648</code>, <code>10137751-10137769</code>, <code>dmesg.log:12</code>, "
            "<code>...</code></td>") in html, html
    assert "<td><code>x.service</code></td>" in html
    assert "<code>--tp-size 8, --dp 2</code> and <code>journal.log:7</code>" in html

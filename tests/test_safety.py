"""Rule, template and report safety, end to end (ingest a hostile log, then run the commands).

Rules: YAML is loaded safely (no Python objects, alias bombs bounded); a user pattern prone to catastrophic
backtracking is bounded by a timeout and reported by rule id; a bad user regex (`timeline --grep`) is a clean
error. Templates (`report --template DIR`) run sandboxed: no Python internals, no files outside the template
directory, exit 2 with a clean message. Reports: log text holding HTML, Markdown links and images, backtick runs
and secrets is inert in Markdown and HTML, verbatim in JSON, and with `--redact` no planted value survives in any
format. (test_render.py / test_redact.py cover the same on fixtures; these go through ingest and the CLI.)
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from helpers import backtrack_pack
from test_hostile import cli, run_cli

STAMP = "2025-05-25T{}+00:00 gpu-node-7.corp.example.com"
PAYLOADS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[click](http://evil)",
            "![x](http://evil/x.png)", "```", "~~~", "<a href=javascript:alert(1)>x</a>"]
SECRETS = {
    "host": ["gpu-node-7.corp.example.com"],
    "ip": ["10.1.2.200", "10.1.2.15", "2001:db8::7"],
    "email": ["alice.ops@example.com"],
    "user": ["mallory"],
    "mac": ["3c:ec:ef:12:34:56"],
    "token": ["sk-test1234567890abcdefXYZ", "hf_AbCdEfGhIjKlMnOpQrStUv",
              "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz"],
}
EVIL_UNIT = "evil<script>alert(1)</script>.service"
EVIL_LOG = "\n".join([
    f"{STAMP.format('20:10:00')} systemd[1]: Started {EVIL_UNIT} - SGLang <img src=x onerror=alert(1)>.",
    f"{STAMP.format('20:10:01')} python3[48213]: [2025-05-25 20:10:01 TP0] server_args=ServerArgs("
    f"model_path='/home/mallory/models/x', host='10.1.2.200', port=30000, api_key='sk-test1234567890abcdefXYZ', "
    f"served_model_name='<img src=x onerror=alert(1)>')",
    f"{STAMP.format('20:12:00')} sshd[5051]: Accepted publickey for mallory from 10.1.2.15 port 51422 ssh2",
    f"{STAMP.format('20:17:10')} python3[48213]: [2025-05-25 20:17:10 TP0] Scheduler hit an exception: "
    f"Traceback (most recent call last):",
    f'{STAMP.format("20:17:10")} python3[48213]:   File "/home/mallory/sglang/scheduler.py", line 12, in event_loop',
    f"{STAMP.format('20:17:10')} python3[48213]: torch.OutOfMemoryError: CUDA out of memory. " + " ".join(PAYLOADS)
    + " `` ` | pipe | ssh mallory@10.1.2.15 alice.ops@example.com peer [2001:db8::7]:443 mac 3c:ec:ef:12:34:56 "
      "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUv Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz #1234 "
      "www.evil.example \u202egnp.exe",
    f"{STAMP.format('20:17:18')} kernel: Out of memory: Killed process 48213 (python3) total-vm:548752420kB, "
    f"anon-rss:502856688kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:985412kB oom_score_adj:0",
    f"{STAMP.format('20:17:19')} systemd[1]: {EVIL_UNIT}: Main process exited, code=killed, status=9/KILL",
    f"{STAMP.format('20:17:19')} systemd[1]: {EVIL_UNIT}: Failed with result 'signal'.",
]) + "\n"


@pytest.fixture(scope="module")
def evil_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("evil")
    (d / "evil.log").write_text(EVIL_LOG)
    r = run_cli(d / "store", "ingest", str(d / "evil.log"))
    assert r.returncode == 0, r.stderr
    inc = subprocess.run(cli(d / "store", "incidents", "--json"), capture_output=True, text=True)
    assert inc.returncode == 0 and json.loads(inc.stdout), inc.stderr
    return d / "store"


class Invoked:
    def __init__(self, code: int, stdout: str, stderr: str, exc: BaseException | None):
        self.returncode, self.stdout, self.stderr, self.exception = code, stdout, stderr, exc

    @property
    def crashed(self) -> bool:
        """An exception escaped the command (a traceback for the user)."""
        return self.exception is not None and not isinstance(self.exception, SystemExit)


def invoke(store: Path, *args: str) -> Invoked:
    """The CLI in-process (click's runner): same command code, no interpreter start-up per call."""
    from click.testing import CliRunner

    from forensics.cli import main

    r = CliRunner().invoke(main, ["--store", str(store), *args])
    return Invoked(r.exit_code, r.stdout, r.stderr, r.exception)


def _report(store: Path, *args: str) -> str:
    r = invoke(store, "report", "--incident", "2025-05-25", "--max-chars", "0", *args)
    assert r.returncode == 0 and not r.crashed, (r.exception, r.stderr[-3000:])
    return r.stdout


# ------------------------------------------------------------------------------------------------------------
# report safety


class _Html(HTMLParser):
    """Collects elements, attributes, and the text outside <code>/<pre>."""

    VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str, str | None]] = []
        self.prose: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend((tag, k, v) for k, v in attrs)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if not {"code", "pre", "style", "title", "script"} & set(self.stack):
            self.prose.append(data)


ACTIVE_TAGS = {"script", "img", "a", "iframe", "object", "embed", "form", "input", "base", "link", "video", "audio",
               "source", "frame", "frameset", "applet", "button", "textarea", "select", "math", "image", "use",
               "foreignobject", "animate", "set"}
LINKISH = re.compile(r"\S*(?:://|\bwww\.|@[A-Za-z0-9]|(?<![\w&])#\d)\S*")


def _markup(doc: str) -> _Html:
    p = _Html()
    p.feed(doc)
    p.close()
    return p


def test_markdown_report_makes_no_html_links_or_images(evil_store: Path) -> None:
    md = _report(evil_store)
    assert "alert(1)" in md and "click" in md and "evil/x.png" in md, "the payload did not reach the report"
    # what GitHub / GitLab / a ticket system would make of it: CommonMark with raw HTML allowed
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    p = _markup(rendered)
    assert not (p.tags & ACTIVE_TAGS), p.tags & ACTIVE_TAGS
    assert not [a for a in p.attrs if a[1].startswith("on") or a[1] in ("href", "src", "style")], p.attrs[:5]
    # words a renderer autolinks (URLs, www., e-mails, @mentions, #123 issue refs) only inside code
    loose = [m.group(0) for text in p.prose for m in LINKISH.finditer(text)]
    assert not loose, loose[:10]
    assert "\u202e" not in md, "a bidi override reached the Markdown"


def test_backticks_in_log_text_do_not_garble_the_rule_text(evil_store: Path) -> None:
    md = _report(evil_store)
    rendered = MarkdownIt("commonmark").enable("table").render(md)
    # the python.traceback rule's explanation quotes `Scheduler hit an exception:` as code
    assert "<code>Scheduler hit an exception:</code>" in rendered
    assert "\\`" not in re.sub(r"<code>.*?</code>", "", rendered, flags=re.S)


def test_html_report_is_escaped_and_inert(evil_store: Path) -> None:
    page = _report(evil_store, "--format", "html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "onerror=alert(1)" in page
    p = _markup(page)
    assert not (p.tags & ACTIVE_TAGS), p.tags & ACTIVE_TAGS
    bad = [a for a in p.attrs if a[1].startswith("on") or a[1] in ("href", "src", "xlink:href", "srcset", "action",
                                                                     "formaction", "background", "poster")]
    assert not bad, bad[:5]
    assert not [a for a in p.attrs if a[2] and "javascript:" in a[2].lower()]
    assert "default-src 'none'" in page
    assert "\u202e" not in page


def test_json_report_keeps_log_text_verbatim(evil_store: Path) -> None:
    doc = json.loads(_report(evil_store, "--format", "json"))
    text = json.dumps(doc, ensure_ascii=False)
    for payload in PAYLOADS:
        assert payload in text, payload
    messages = [e["message"] for inc in doc["incidents"] for e in inc["events"]]
    assert any("<script>alert(1)</script>" in m and "[click](http://evil)" in m for m in messages)


def _readable(text: str, fmt: str) -> str:
    """Every way a value could still be read: raw, Markdown-unescaped, HTML-unescaped, JSON-decoded."""
    views = [text, re.sub(r"\\(.)", r"\1", text), html.unescape(text), html.unescape(re.sub(r"\\(.)", r"\1", text))]
    if fmt == "json":
        views.append(json.dumps(json.loads(text), ensure_ascii=False))
    return "\n".join(views).lower()


ORIGINALS = [v for values in SECRETS.values() for v in values]


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_planted_secrets_are_in_the_unredacted_reports(evil_store: Path, fmt: str) -> None:
    """Every planted value is in every format unredacted, so the leak test of each format proves something."""
    seen = _readable(_report(evil_store, "--format", fmt), fmt)
    for value in ORIGINALS:
        assert value.lower() in seen, f"{value} never reached the {fmt} report: its redaction test would prove nothing"


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_redacted_report_leaks_nothing(evil_store: Path, fmt: str) -> None:
    out = _report(evil_store, "--format", fmt, "--redact")
    readable = _readable(out, fmt)
    for value in ORIGINALS:
        assert value.lower() not in readable, f"{value} survived --redact in {fmt}"
    assert "host-1" in out and "ip-" in out and "token-" in out


# ------------------------------------------------------------------------------------------------------------
# rule packs


def _pack(tmp: Path, name: str, text: str) -> Path:
    d = tmp / f"rules-{name}"
    d.mkdir()
    (d / f"{name}.yaml").write_text(text)
    return d


def test_unsafe_yaml_tags_are_refused_end_to_end(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    d = _pack(tmp_path, "unsafe", "pack: unsafe\nrules:\n  - id: u.x\n    kind: !!python/object/apply:os.system "
                                  f"['touch {marker}']\n")
    log = tmp_path / "a.log"
    log.write_text("2025-05-25T00:00:00+00:00 h app[1]: x\n")
    r = run_cli(tmp_path / "store", "ingest", "--rules", str(d), str(log))
    assert r.returncode == 2 and "unsafe.yaml:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run_cli(tmp_path / "store", "rules", "check", str(d / "unsafe.yaml"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert not marker.exists()


def test_yaml_alias_bomb_is_bounded(tmp_path: Path) -> None:
    lines = ["pack: bomb", "kinds:", '  k0: {role: cause, description: &a0 "lol"}']
    for i in range(1, 10):
        lines.append(f"  k{i}: {{role: cause, description: x, extra: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]}")
    lines += ["lookups:", "  t: {1: *a9}", "rules:", "  - id: b.x", "    kind: k0", "    severity: error",
              "    role: cause", "    pattern: 'Killed process (?P<pid>\\d+)'", "    title: '{pid}'", "    explain: e",
              "    examples:", "      match: [{line: 'Killed process 1', fields: {pid: *a9}}]",
              "      near_miss: ['no']"]
    d = _pack(tmp_path, "bomb", "\n".join(lines) + "\n")
    t0 = time.monotonic()
    r = run_cli(tmp_path / "store", "rules", "check", str(d / "bomb.yaml"), timeout=60)
    assert time.monotonic() - t0 < 30 and r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.maxrss_mb < 1024


BACKTRACK_PACK = backtrack_pack("evil", "evil.backtrack", "evil_run")
BACKTRACK_LINES = 16


@pytest.fixture(scope="module")
def backtrack_run(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    d = tmp_path_factory.mktemp("backtrack")
    rules = _pack(d, "evil", BACKTRACK_PACK)
    log = d / "bt.log"
    log.write_text("".join(f"2025-05-25T00:00:{i:02d}+00:00 h app[1]: {'a' * 32}!\n" for i in range(BACKTRACK_LINES)))
    t0 = time.monotonic()
    r = run_cli(d / "store", "ingest", "--rules", str(rules), str(log), timeout=600)
    return r, time.monotonic() - t0, d, rules


def test_catastrophic_user_pattern_is_bounded(backtrack_run) -> None:  # noqa: ANN001
    r, took, d, _ = backtrack_run
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert took < 0.25 * BACKTRACK_LINES + 30, f"{took:.0f} s"
    from forensics.store import Store

    (src,) = Store(d / "store").sources()
    assert src.records == BACKTRACK_LINES


def test_catastrophic_user_pattern_is_reported_by_rule_id(backtrack_run) -> None:  # noqa: ANN001
    r, _, _, _ = backtrack_run
    said = [ln for ln in r.stderr.splitlines() if "evil.backtrack" in ln]
    assert said and any("time" in ln for ln in said), r.stderr[-2000:]


def test_catastrophic_user_pattern_has_a_total_budget(backtrack_run) -> None:  # noqa: ANN001
    _, took, _, _ = backtrack_run
    assert took < 0.1 * BACKTRACK_LINES + 2.5, f"{BACKTRACK_LINES} hostile lines took {took:.1f} s"


def test_explain_says_when_a_rule_timed_out(backtrack_run) -> None:  # noqa: ANN001
    _, _, d, rules = backtrack_run
    r = invoke(d / "store", "explain", "--rules", str(rules), f"2025-05-25T00:00:00+00:00 h app[1]: {'a' * 32}!")
    assert "evil.backtrack" in r.stdout + r.stderr


def test_rescan_reports_the_rule_that_timed_out(backtrack_run) -> None:  # noqa: ANN001
    _, _, d, rules = backtrack_run
    t0 = time.monotonic()
    r = invoke(d / "store", "rescan", "--rules", str(rules))
    assert r.returncode == 0 and not r.crashed, (r.exception, r.stderr[-2000:])
    assert time.monotonic() - t0 < 0.1 * BACKTRACK_LINES + 2.5
    said = [ln for ln in r.stderr.splitlines() if "evil.backtrack" in ln]
    assert any(ln.startswith("warning:") and "bt.log" in ln and "timed out" in ln for ln in said), r.stderr
    assert any(ln.startswith("rescanned:") for ln in said), r.stderr


@pytest.mark.parametrize("pattern", ["(", "(?=a)"])
def test_bad_grep_pattern_is_a_clean_error(evil_store: Path, pattern: str) -> None:
    r = invoke(evil_store, "timeline", "--grep", pattern)
    assert r.returncode == 2 and not r.crashed and pattern in r.stderr, (r.exception, r.stderr[-1500:])


def test_pathological_grep_pattern_is_linear(evil_store: Path) -> None:
    t0 = time.monotonic()
    r = invoke(evil_store, "timeline", "--grep", "(a+)+$|(a|aa)+$")
    assert r.returncode in (0, 1) and not r.crashed and time.monotonic() - t0 < 30, r.exception


# ------------------------------------------------------------------------------------------------------------
# user templates


SANDBOX_ESCAPES = {
    "mro": "{{ ''.__class__.__mro__ }}",
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals-cycler": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "globals-lipsum": "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "format": "{{ '{0.__class__.__init__.__globals__}'.format(report) }}",
    "self": "{{ self.__init__.__globals__ }}",
    "dict": "{{ report.__dict__ }}",
    "mutate": "{{ report.incidents.append(1) }}",
    "include-abs": "{% include '/etc/passwd' %}",
    "include-dotdot": "{% include '../../../../../../../etc/passwd' %}",
    "extends-abs": "{% extends '/etc/passwd' %}",
    "import": "{% import '/etc/hostname' as h %}{{ h }}",
}


LEAKS = ("root:x:0:0", "<class", "__builtins__", "uid=0", "popen", "<module")


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_user_template_cannot_reach_python_or_files(evil_store: Path, tmp_path: Path, fmt: str) -> None:
    """Every escape fails with a jinja2 TemplateError/SecurityError (what `report` turns into exit 2)."""
    import jinja2

    from forensics.correlate import resolve_incidents
    from forensics.render import ReportOptions, render_report
    from forensics.store import Store

    incidents = resolve_incidents(Store(evil_store), "2025-05-25")
    assert incidents
    for name, source in SANDBOX_ESCAPES.items():
        d = tmp_path / f"{fmt}-{name}"
        d.mkdir()
        (d / f"report.{fmt}.j2").write_text(source + "\n")
        with pytest.raises(jinja2.TemplateError) as e:   # SecurityError and TemplateNotFound are TemplateErrors
            out = render_report(incidents, fmt, ReportOptions(template_dir=d))  # type: ignore[arg-type]
            pytest.fail(f"{name}: rendered {out[:200]!r}")
        for leak in LEAKS:
            assert leak not in str(e.value).replace("__class__", ""), (name, leak)


@pytest.mark.parametrize("name", ["mro", "include-abs"])
def test_user_template_escape_exits_2(evil_store: Path, tmp_path: Path, name: str) -> None:
    (tmp_path / "report.md.j2").write_text(SANDBOX_ESCAPES[name] + "\n")
    r = invoke(evil_store, "report", "--incident", "2025-05-25", "--template", str(tmp_path))
    assert r.returncode == 2 and not r.crashed and "template error" in r.stderr, (r.exception, r.stderr[-1500:])
    assert not any(leak in r.stdout for leak in LEAKS)


def test_user_template_symlink_cannot_read_outside(evil_store: Path, tmp_path: Path) -> None:
    d = tmp_path / "tpl"
    d.mkdir()
    os.symlink("/etc/passwd", d / "link.j2")
    (d / "report.md.j2").write_text("{% include 'link.j2' %}\n")
    r = invoke(evil_store, "report", "--incident", "2025-05-25", "--template", str(d))
    assert "root:x:0:0" not in r.stdout
    assert r.returncode == 2 and not r.crashed


def test_user_template_range_bomb_is_a_clean_error(evil_store: Path, tmp_path: Path) -> None:
    d = tmp_path / "tpl"
    d.mkdir()
    (d / "report.md.j2").write_text("{{ range(10**9) | list | length }}\n")
    r = invoke(evil_store, "report", "--incident", "2025-05-25", "--template", str(d))
    assert r.returncode == 2 and not r.crashed, r.exception


def test_user_template_cannot_run_forever(evil_store: Path, tmp_path: Path) -> None:
    d = tmp_path / "tpl"
    d.mkdir()
    (d / "report.md.j2").write_text("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}\n")
    try:
        r = run_cli(evil_store, "report", "--incident", "2025-05-25", "--template", str(d), timeout=6)
    except TimeoutError:
        pytest.fail("the template ran for more than 6 s")
    assert r.returncode == 2 and "Traceback" not in r.stderr


BOMBS = {
    "repeat": ("{{ 'a' * 10**9 }}", "`*`"),
    "percent-width": ("{{ '%999999999d' % 1 }}", "%-format"),
    "format-filter-width": ("{{ '%999999999d' | format(1) }}", "%-format"),
    "format-spec-width": ("{{ '{:999999999}'.format(1) }}", "format spec"),
    "center": ("{{ 'x'.center(10**9) }}", "str.center"),
    "center-filter": ("{{ 'x' | center(10**9) }}", "center"),
    "indent-filter": ("{{ 'x' | indent(10**9, true) }}", "indent"),
    "replace": ("{{ ('x' * 10**7).replace('x', 'y' * 10) }}", "str.replace"),
    "macro-doubling": ("{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ d('a', 40) }}",
                       "argument"),
    "output": ("{% for i in range(100) %}{{ 'x' * 400000 }}{% endfor %}", "output grew"),
    "zero-division": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "recursion": ("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "RecursionError"),
}


@pytest.fixture(scope="module")
def evil_incidents(evil_store: Path):  # noqa: ANN201
    from forensics.correlate import resolve_incidents
    from forensics.store import Store

    return resolve_incidents(Store(evil_store), "2025-05-25")


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_user_template_bombs_are_refused_naming_the_template(evil_incidents, tmp_path: Path,  # noqa: ANN001
                                                             name: str) -> None:
    """A value too big to build, an output too big, or a plain Python error: a TemplateError naming the file
    and line, quickly, before the memory is taken."""
    import jinja2

    from forensics.render import ReportOptions, render_report

    source, words = BOMBS[name]
    (tmp_path / "report.md.j2").write_text("line one\n" + source + "\n")
    t0 = time.monotonic()
    with pytest.raises(jinja2.TemplateError) as e:
        render_report(evil_incidents, "md", ReportOptions(template_dir=tmp_path, max_chars=0, template_seconds=30))
    assert time.monotonic() - t0 < 20
    assert words in str(e.value), str(e.value)
    assert e.value.filename == str((tmp_path / "report.md.j2").resolve()) and e.value.lineno == 2, (
        e.value.filename, e.value.lineno)


def test_user_template_time_limit_holds_off_the_main_thread(evil_incidents, tmp_path: Path) -> None:  # noqa: ANN001
    """Outside the main thread there is no SIGALRM: a trace function keeps the limit."""
    import threading

    import jinja2

    from forensics.render import ReportOptions, render_report

    (tmp_path / "report.md.j2").write_text("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}"
                                           "{% endfor %}\n")
    got: list[BaseException] = []

    def run() -> None:
        try:
            render_report(evil_incidents, "md", ReportOptions(template_dir=tmp_path, template_seconds=0.5))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            got.append(e)

    t0 = time.monotonic()
    th = threading.Thread(target=run)
    th.start()
    th.join(30)
    assert not th.is_alive() and time.monotonic() - t0 < 10
    (e,) = got
    assert isinstance(e, jinja2.TemplateError) and "0.5 s" in str(e) and "--template-seconds" in str(e), e


def test_user_template_links_inside_the_directory_still_work(evil_store: Path, tmp_path: Path) -> None:
    d = tmp_path / "tpl"
    (d / "partials").mkdir(parents=True)
    (d / "mine.md.j2").write_text("{{ h }} My summary\n")
    os.symlink("../mine.md.j2", d / "partials" / "summary.md.j2")
    r = invoke(evil_store, "report", "--incident", "2025-05-25", "--template", str(d))
    assert r.returncode == 0 and "## My summary" in r.stdout, (r.exception, r.stderr[-1500:])

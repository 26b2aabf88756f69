"""Redaction: planted host names, addresses, e-mails, user names and tokens never reach any output."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.incident_fixture import SECRETS, private_incident, seed_incident, seed_reader

from forensics.redact import RedactionError, RedactionMap, Redactor
from forensics.render import ReportOptions, render_report

OPTS = ReportOptions(tz="Europe/Berlin", tool_version="0.0.0-test", source_reader=seed_reader, redact=True,
                     max_chars=0)
ORIGINALS = [v for values in SECRETS.values() for v in values]


def _readable(text: str, fmt: str) -> str:
    """Every way a value could still be read: raw, Markdown-unescaped, HTML-unescaped, JSON-decoded."""
    views = [text, re.sub(r"\\(.)", r"\1", text), html.unescape(text), html.unescape(re.sub(r"\\(.)", r"\1", text))]
    if fmt == "json":
        views.append(json.dumps(json.loads(text), ensure_ascii=False))
    return "\n".join(views).lower()


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_no_original_value_survives(fmt: str) -> None:
    out = render_report([private_incident()], fmt, OPTS)  # type: ignore[arg-type]
    readable = _readable(out, fmt)
    for value in ORIGINALS:
        assert value.lower() not in readable, value
    assert "/home/user-" in out and "host-1" in out and "ip-1" in out and "token-" in out and "email-1" in out


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_planted_values_are_really_in_the_unredacted_report(fmt: str) -> None:
    """(JSON carries no context lines read from the files, so not every planted value: test_safety.py checks
    JSON on a log that puts every value into every format.)"""
    out = render_report([private_incident()], fmt, replace(OPTS, redact=False))  # type: ignore[arg-type]
    readable = _readable(out, fmt)
    for value in ORIGINALS:
        assert value.lower() in readable, value


def test_pseudonyms_are_consistent_between_sections_and_formats() -> None:
    md = render_report([private_incident()], "md", OPTS)
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", md, flags=re.M | re.S))
    # the host is host-1 in the summary, the timeline's sources, the configuration and the appendix
    for name in ("Summary", "Configuration at the time of failure", "Environment", "Appendix"):
        assert "host-1" in sections[name], name
    # the address planted in a log line and in the launch flags is the same pseudonym in both places
    ip = re.search(r"root@(ip-\d+)", md)
    assert ip is not None
    assert f"`--host` | `{ip.group(1)}`" in sections["Configuration at the time of failure"]
    assert ip.group(1) in sections["What the key lines reveal"] and ip.group(1) in sections["Recommended actions"] \
        or ip.group(1) in sections["What the key lines reveal"]
    js = json.loads(render_report([private_incident()], "json", OPTS))
    inc = js["incidents"][0]
    assert inc["incident"]["hosts"] == ["host-1"]
    assert inc["incident"]["id"] == "2025-05-25-host-1-sglang-k26-eagle3"
    flags = {f["name"]: f["value"] for f in inc["configuration"][0]["flags"]}
    assert flags["--host"] == ip.group(1)
    assert js["redacted"] is True


def test_redaction_is_deterministic_and_the_map_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    first = render_report([private_incident()], "md", replace(OPTS, redact_map=path))
    saved = json.loads(path.read_text())
    assert saved["version"] == 1 and saved["map"]["host"]["dflash-train"] == "host-1"
    assert saved["map"]["ip"]["10.1.2.200"].startswith("ip-")
    # a report of a different incident keeps the pseudonyms of the saved map
    other = replace(seed_incident(), events=seed_incident().events[:1])
    again = render_report([other], "md", replace(OPTS, redact_map=path))
    assert "host-1" in again and "dflash-train" not in again
    assert render_report([private_incident()], "md", replace(OPTS, redact_map=path)) == first
    assert render_report([private_incident()], "md", OPTS) == first


def test_redactor_units() -> None:
    texts = ["ssh root@10.1.2.200 alice@example.com token=abcdef123 --api-key sk-abcdefghijklmnopqrstu",
             "Accepted publickey for bob from 192.168.1.7 port 22", "cd /home/carol/x",
             "https://u:pw1234@h.example.com/x?api_key=XYZ123&b=1", "Authorization: Bearer abcdefghijkl",
             "fe80::1 aa:bb:cc:dd:ee:ff 2001:DB8::42",
             "kept: 20:17:19.123 0000:01:00.0 std::vector 127.0.0.1 0.0.0.0:30001 ::1 version 1.2.3 root"]
    r = Redactor()
    r.learn(texts)
    out = [r.redact_text(t) for t in texts]
    assert out[0] == "ssh root@ip-1 email-1 token=token-1 --api-key token-2"
    assert out[1] == "Accepted publickey for user-1 from ip-2 port 22"
    assert out[2] == "cd /home/user-2/x"
    assert out[3] == "https://user-3:token-3@host-1/x?api_key=token-4&b=1"
    assert out[4] == "Authorization: Bearer token-5"
    assert out[5] == "ip-3 mac-1 ip-4"
    assert out[6] == texts[6]
    # spelling variants of one address share a pseudonym
    r2 = Redactor()
    r2.learn(["2001:db8::42 and 2001:DB8:0:0::42"])
    assert r2.redact_text("2001:db8::42 and 2001:DB8:0:0::42") == "ip-1 and ip-1"


def test_check_refuses_a_leak() -> None:
    r = Redactor()
    r.learn(["host 10.9.8.7"])
    with pytest.raises(RedactionError) as e:
        r.check("<p>10.9.8.7</p>", "html")
    assert "10.9.8.7" not in str(e.value)
    r.check("<p>ip-1</p>", "html")


def test_bad_map_file(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="m.json"):
        RedactionMap.load(bad)
    bad.write_text('{"version": 1, "map": {"planet": {}}}')
    with pytest.raises(ValueError, match="unknown kind"):
        RedactionMap.load(bad)


def test_a_redacted_report_names_no_host_of_other_incidents(tmp_path: Path) -> None:
    """The incident of a file that names no host, in a store of several: its gaps said which hosts the store holds
    (`... holds several (gpu-a1, gpu-b2)`), names the report's own data never gave the redactor to learn, so
    `--redact` let them through. They are counted, not named."""
    from click.testing import CliRunner

    from forensics.cli import main

    root = Path(__file__).resolve().parent.parent
    logs = []
    for h in ("gpu-a1", "gpu-b2"):
        p = tmp_path / f"{h}.log"
        p.write_text(f"May 20 09:00:00 {h} app[7]: hello\nMay 20 09:01:00 {h} app[7]: bye\n")
        logs.append(str(p))
    store = str(tmp_path / "s")
    r = CliRunner().invoke(main, ["--store", store, "ingest", "--year", "2025",
                                  str(root / "samples" / "formats" / "sglang.log"), *logs])
    assert r.exit_code == 0, r.output
    for fmt in ("md", "json"):
        out = tmp_path / f"r.{fmt}"
        r = CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-20", "--redact",
                                      "--format", fmt, "-o", str(out)])
        assert r.exit_code == 0, r.output
        text = out.read_text()
        assert "names no host and the store holds 2 hosts" in text.replace("\\n", " ")
        assert "gpu-a1" not in text and "gpu-b2" not in text

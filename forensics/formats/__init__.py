"""The format registry: an explicit dict, name -> format. A new format is one module plus one entry here."""

from __future__ import annotations

from . import (
    container,
    dmesg,
    dmesg_ctime,
    dmesg_decode,
    dmesg_iso,
    dmesg_json,
    dmesg_prio,
    dmesg_reltime,
    flashinfer_jit,
    generic,
    generic_syslog,
    glog,
    journal_export,
    journal_json,
    journal_short,
    journal_short_delta,
    journal_short_full,
    journal_short_iso,
    journal_short_iso_precise,
    journal_short_monotonic,
    journal_short_precise,
    journal_short_unix,
    journal_verbose,
    journal_with_unit,
    sglang,
    syslog,
    syslog_rfc3339,
    syslog_rfc5424,
    systemctl_is_active,
    systemctl_show,
    systemctl_status,
    text,
    unit_file,
    uvicorn,
    vllm,
)
from .base import Continuation, LineFormat, Stamp, StructuredFormat

_ALL: tuple[LineFormat, ...] = (
    journal_short.FORMAT,
    journal_short_precise.FORMAT,
    journal_short_iso.FORMAT,
    journal_short_iso_precise.FORMAT,
    journal_short_full.FORMAT,
    journal_with_unit.FORMAT,
    journal_short_monotonic.FORMAT,
    journal_short_delta.FORMAT,
    journal_short_unix.FORMAT,
    *journal_json.FORMATS,
    journal_verbose.FORMAT,
    journal_export.FORMAT,
    systemctl_status.FORMAT,
    systemctl_show.FORMAT,
    unit_file.FORMAT,
    systemctl_is_active.FORMAT,
    dmesg.FORMAT,
    dmesg_prio.FORMAT,
    dmesg_decode.FORMAT,
    dmesg_ctime.FORMAT,
    dmesg_iso.FORMAT,
    dmesg_json.FORMAT,
    dmesg_reltime.FORMAT,
    sglang.FORMAT,
    vllm.FORMAT,
    uvicorn.FORMAT,
    glog.FORMAT,
    container.FORMAT,
    flashinfer_jit.FORMAT,
    syslog.FORMAT,
    syslog_rfc3339.FORMAT,
    syslog_rfc5424.FORMAT,
    generic.FORMAT,
    generic_syslog.FORMAT,
    text.FORMAT,
)

FORMATS: dict[str, LineFormat] = {f.name: f for f in _ALL}
TEXT = text.FORMAT

JOURNAL_TEXT = frozenset({
    "journal-short", "journal-short-precise", "journal-short-iso", "journal-short-iso-precise",
    "journal-short-full", "journal-with-unit", "journal-short-monotonic", "journal-short-delta", "journal-short-unix",
    "syslog", "syslog-rfc3339",
})
JOURNAL_ALL = JOURNAL_TEXT | {"journal-json", "journal-json-pretty", "journal-json-seq", "journal-json-sse",
                              "journal-verbose", "journal-export"}
DMESG = frozenset({"dmesg", "dmesg-prio", "dmesg-decode", "dmesg-ctime", "dmesg-iso", "dmesg-json",
                   "dmesg-reltime"})

__all__ = ["FORMATS", "TEXT", "JOURNAL_TEXT", "JOURNAL_ALL", "DMESG", "LineFormat", "StructuredFormat", "Stamp",
           "Continuation"]

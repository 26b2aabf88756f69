"""Format `syslog-rfc5424`: the syslog protocol of RFC 5424, as a collector writes it to a file.

`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG`: rsyslog's `RSYSLOG_SyslogProtocol23Format`,
syslog-ng's `syslog-protocol`, systemd-netlogd. The time is RFC 3339 with its offset (exact); a field that is
`-` (the nil value) has no value; the structured data (`[meta sequenceId="5"]`) is not part of the message, and a
UTF-8 byte order mark at the head of the message is taken off (RFC 5424 section 6.4). The level is PRI mod 8.
"""

from __future__ import annotations

import polars as pl

from .base import Continuation, HookedFormat, PostContext, Stamp

STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})"
SD = r'-|(?:\[(?:[^"\]]|"(?:[^"\\]|\\.)*")*\])+'


class SyslogRfc5424(HookedFormat):
    def post(self, df: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        nil = [pl.when(pl.col(c) == "-").then(None).otherwise(pl.col(c)).alias(c) for c in ("host", "ident")]
        return df.with_columns(*nil, pl.col("msg").fill_null("").str.strip_prefix("\ufeff").alias("msg"))


FORMAT = SyslogRfc5424(
    name="syslog-rfc5424",
    description="RFC 5424 syslog: `<PRI>1 2025-05-25T20:17:19.402310+00:00 host app procid msgid [sd] msg`",
    pattern=(rf"^<(?P<prio>\d{{1,3}})>\d{{1,2}} (?P<stamp>{STAMP}|-) (?P<host>\S+) (?P<ident>\S+) (?P<pid>\S+) "
             rf"(?P<msgid>\S+) (?P<sd>{SD})(?: (?P<msg>.*))?$"),
    stamp=Stamp.ISO,
    continuation=Continuation.NONE,
    priority=22,
    example="<30>1 2025-05-25T20:17:19.402310+00:00 gpu-node-1 systemd 1 - - sglang.service: Main process exited, "
            "code=killed, status=9/KILL",
)

"""Format `journal-with-unit`: journalctl -o with-unit: like short-full, with the unit in place of the identifier."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-with-unit',
    description='journalctl -o with-unit: like short-full, with the unit in place of the identifier',
    pattern='^(?P<stamp>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<date>\\d{4}-\\d{2}-\\d{2}) (?P<time>\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,6})?) (?P<zone>[A-Za-z][A-Za-z0-9+\\-/_]*)) (?:(?P<host>[^\\s\\[\\]:]+) )?(?:(?P<unit>[^\\s\\[/]+\\.(?:service|scope|slice|socket|timer|mount|target|path|device|swap|automount))(?:/\\S+)?|(?P<ident>kernel))(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    stamp=Stamp.FULL,
    priority=15,
    example='Sun 2025-05-25 20:17:19 UTC dflash-train sglang.service[48213]: [2025-05-25 20:17:19 TP0] Load weight begin. avail mem=78.53 GB',
)

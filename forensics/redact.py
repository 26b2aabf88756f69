"""Redaction: replace host names, user names, addresses, e-mails and secrets by stable pseudonyms.

One `Redactor` is built over everything a report will show (`learn`), then rewrites it in one pass
(`apply`), so a value gets the same pseudonym in every section: `10.1.2.200` -> `ip-1`,
`dflash-train` -> `host-1`, `alice` -> `user-1`, `alice@example.com` -> `email-1`,
`hf_...` -> `token-1`, `aa:bb:cc:dd:ee:ff` -> `mac-1`.

What is collected:
- host names from the structured data (every `host`/`hosts`/`hostname` field and key), plus
  `rhost=`/`hostname=` and URL hosts in messages, and words ending in a common top-level domain
  (`node7.corp.example.com`; with its first label when that looks like a machine name, `node-7`);
- user names from messages (`for user X`, `invalid user X`, `Accepted ... for X from`, `user=X`,
  `X@host`, `sudo: X :`, `/home/X`, `/Users/X`) and `user` fields; well-known system accounts
  (`root`, `nobody`, `daemon`, `systemd-*`, ...) are kept, they identify no one;
- IPv4 and IPv6 addresses (not the unspecified and loopback addresses `0.0.0.0`, `127.x`, `::`, `::1`),
  MAC addresses and e-mail addresses, by pattern;
- secrets: values of `token=`, `api_key=`, `password=`, `secret=` (URLs, arguments, environment
  variables), `--api-key X`/`--hf-token X`, `Bearer X`, URL passwords (`://user:pass@`), and tokens
  that look like one (`hf_...`, `sk-...`, `ghp_...`, `glpat-...`, `xox?-...`, `AKIA...`, JWTs).

Pseudonyms are numbered per kind in order of first appearance in a canonical walk of the data
(dataclass fields in declaration order, dict items in key order), so the same input always gives
the same mapping. A saved mapping (`RedactionMap`) is reused: known values keep their pseudonyms and
new ones continue the numbering. The mapping file holds the original values: keep it private.
"""

from __future__ import annotations

import html
import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from .outfile import write_text

__all__ = ["KINDS", "RedactionMap", "Redactor", "RedactionError"]

T = TypeVar("T")

KINDS: tuple[str, ...] = ("host", "user", "email", "ip", "mac", "token")
MAP_VERSION = 1

SYSTEM_USERS = frozenset({
    "root", "nobody", "daemon", "bin", "sys", "sync", "adm", "lp", "mail", "news", "uucp", "proxy", "backup",
    "list", "irc", "gnats", "www-data", "syslog", "messagebus", "sshd", "_apt", "polkitd", "avahi", "colord",
    "dnsmasq", "ntp", "chrony", "postfix", "git", "user", "users", "admin", "test", "unknown", "invalid",
    "none", "null", "localhost", "buildd",
})
LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "unknown", "-"})
HOST_KEYS = frozenset({"host", "hosts", "hostname", "_hostname"})
USER_KEYS = frozenset({"user", "username", "user_name", "login", "ruser"})


class RedactionError(RuntimeError):
    """Raised when an original value would survive in a rendered output."""


# ----------------------------------------------------------------------------- patterns

_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,31}"
_USER_PATTERNS = [re.compile(p) for p in (
    rf"\bfor (?:invalid |illegal )?user (?P<v>{_NAME})",
    rf"\b[Ii]nvalid user (?P<v>{_NAME})",
    rf"\bAccepted \S+ for (?P<v>{_NAME}) from",
    rf"\bof user (?P<v>{_NAME})",
    rf"\b(?:user|ruser|USER|LOGNAME|logname|SUDO_USER)=(?P<v>{_NAME})",
    rf"\bsudo:\s+(?P<v>{_NAME}) :",
    rf"(?<![\w.+%-])(?P<v>{_NAME})@(?=[A-Za-z0-9\[])",
    r"(?:/home|/Users|/var/home|/export/home)/(?P<v>[^/\s'\"`:;,)\]]+)",
)]
_HOST_PATTERNS = [re.compile(p) for p in (
    r"\b(?:rhost|hostname|HOSTNAME|host_name)=(?P<v>[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])",
    r"(?i)\b[a-z][a-z0-9+.-]*://(?:[^/\s@]*@)?(?P<v>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*)",
)]
# Top-level domains that mark a word as a host name. Country codes that are also common file
# extensions (.py, .sh, .md, .so, .pl, .rs, .cc, .in, .ai, .js, .ts) are left out on purpose.
_TLDS = ("com|net|org|edu|gov|mil|int|io|dev|app|cloud|tech|info|biz|xyz|site|online|"
         "internal|local|localdomain|lan|corp|home|intra|intranet|priv|private|example|test|invalid|arpa|"
         "de|uk|fr|nl|ch|se|no|fi|dk|jp|cn|kr|us|ca|au|eu|ru|it|es|be|at|cz|ie|il|br|tw|sg|hk|nz|za")
_FQDN = re.compile(rf"(?<![\w.@/-])(?P<v>[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:{_TLDS}))"
                   r"(?![\w-]|\.[A-Za-z0-9])", re.I)
_EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?"
                   r"(?:%[A-Za-z0-9_.-]+)?(?![\w:])")
_MAC = re.compile(r"(?<![\w:-])[0-9A-Fa-f]{2}(?:([:-])[0-9A-Fa-f]{2})(?:\1[0-9A-Fa-f]{2}){4}(?![\w:-])")
_SECRET_KEY = (r"(?:access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token|api[_-]?key|apikey|"
               r"secret|client[_-]?secret|password|passwd|pwd|private[_-]?key|sig|signature|key|auth)")
_TOKEN_PATTERNS = [re.compile(p) for p in (
    rf"(?i)(?<![A-Za-z0-9])[A-Za-z0-9_]*{_SECRET_KEY}=[\"']?(?P<v>[^\s&\"'<>;,)}}\]]{{4,}})",
    rf"(?i)[\"']{_SECRET_KEY}[\"']\s*:\s*[\"'](?P<v>[^\"'\s]{{4,}})",
    r"(?i)(?<![A-Za-z0-9#])(?:api[_-]?key|apikey|access[_-]?token|client[_-]?secret|secret|password|passwd|"
    r"private[_-]?key)\s*:\s*[\"']?(?P<v>[^\s\"',;]{4,})",
    r"(?i)--(?:[a-z0-9]+-)*(?:token|api-key|apikey|secret|password|passwd|key)[ =][\"']?(?P<v>[^\s\"']{4,})",
    r"(?i)\b(?:Bearer|Basic|token)\s+(?P<v>[A-Za-z0-9._~+/=-]{8,})",
    r"://[^/\s:@]+:(?P<v>[^/\s@]+)@",
    r"(?P<v>\bhf_[A-Za-z0-9]{16,})",
    r"(?P<v>\bsk-[A-Za-z0-9_-]{16,})",
    r"(?P<v>\bgh[pousr]_[A-Za-z0-9]{20,})",
    r"(?P<v>\bglpat-[A-Za-z0-9_-]{16,})",
    r"(?P<v>\bxox[abprs]-[A-Za-z0-9-]{10,})",
    r"(?P<v>\bAKIA[0-9A-Z]{16}\b)",
    r"(?P<v>\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
)]
_URL_USER = re.compile(r"://(?P<v>[^/\s:@]+)(?::[^/\s@]*)?@")


def _canon(kind: str, value: str) -> str:
    """The key a value is known by: spelling variants of one address or host share a pseudonym."""
    if kind == "ip":
        try:
            return str(ipaddress.ip_address(value.split("%", 1)[0]))
        except ValueError:
            return value.lower()
    if kind == "mac":
        return value.lower().replace("-", ":")
    if kind in ("host", "email"):
        return value.lower()
    return value


def _keep_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return True      # not an address at all
    return ip.is_unspecified or ip.is_loopback


# ----------------------------------------------------------------------------- the map

@dataclass(frozen=True)
class RedactionMap:
    """kind -> original (canonical) -> pseudonym."""

    entries: Mapping[str, Mapping[str, str]]

    @classmethod
    def empty(cls) -> RedactionMap:
        return cls({k: {} for k in KINDS})

    @classmethod
    def load(cls, path: Path) -> RedactionMap:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot read the redaction map: {e}") from e
        if not isinstance(data, dict) or data.get("version") != MAP_VERSION or not isinstance(data.get("map"), dict):
            raise ValueError(f"{path}: not a forensics redaction map (expected {{\"version\": {MAP_VERSION}, \"map\": ...}})")
        entries: dict[str, dict[str, str]] = {k: {} for k in KINDS}
        for kind, values in data["map"].items():
            if kind not in KINDS or not isinstance(values, dict):
                raise ValueError(f"{path}: unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
            entries[kind] = {str(k): str(v) for k, v in values.items()}
        return cls(entries)

    def save(self, path: Path) -> None:
        data = {"version": MAP_VERSION,
                "note": "original values: keep this file private",
                "map": {k: dict(self.entries.get(k, {})) for k in KINDS}}
        write_text(Path(path), json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------- walking the data

def walk_strings(obj: Any) -> Iterator[tuple[str, str]]:
    """(field name, string) for every string in `obj`, in canonical order."""

    def go(o: Any, name: str) -> Iterator[tuple[str, str]]:
        if isinstance(o, Enum):
            yield name, str(o.value)
        elif isinstance(o, str):
            yield name, o
        elif is_dataclass(o) and not isinstance(o, type):
            for f in fields(o):
                yield from go(getattr(o, f.name), f.name)
        elif isinstance(o, Mapping):
            for k in sorted(o, key=str):
                if isinstance(k, str):
                    yield "", k
                yield from go(o[k], str(k))
        elif isinstance(o, (list, tuple)):
            for v in o:
                yield from go(v, name)

    yield from go(obj, "")


def _map_strings(obj: T, fn: Any) -> T:
    if isinstance(obj, Enum):
        return obj
    if isinstance(obj, str):
        return fn(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _map_strings(getattr(obj, f.name), fn) for f in fields(obj) if f.init}
        return replace(obj, **changes)  # type: ignore[return-value]
    if isinstance(obj, Mapping):
        return type(obj)({(fn(k) if isinstance(k, str) else k): _map_strings(v, fn) for k, v in obj.items()})  # type: ignore[call-arg]
    if isinstance(obj, tuple):
        return tuple(_map_strings(v, fn) for v in obj)  # type: ignore[return-value]
    if isinstance(obj, list):
        return [_map_strings(v, fn) for v in obj]  # type: ignore[return-value]
    return obj


# ----------------------------------------------------------------------------- the redactor

class Redactor:
    """Learns what to redact from data, then rewrites data and checks rendered text."""

    def __init__(self, mapping: RedactionMap | None = None) -> None:
        base = mapping or RedactionMap.empty()
        self._map: dict[str, dict[str, str]] = {k: dict(base.entries.get(k, {})) for k in KINDS}
        self._literals: dict[str, str] = {}      # literal spelling -> kind
        self._pattern: re.Pattern[str] | None = None
        self._kind_of_group: list[str] = []

    # -- learning

    def _candidates(self, data: Any) -> dict[str, str]:
        found: dict[str, str] = {}

        def add(kind: str, value: str, shortest: int = 2) -> None:
            value = value.strip().strip(".,;:'\"()[]{}<>")
            if not value or value in found:
                return
            if kind == "user" and (value in SYSTEM_USERS or value.startswith("systemd-") or value.isdigit()
                                   or len(value) < shortest):
                return
            if kind == "host" and (value.lower() in LOCAL_HOSTS or not _keep_ip(value) or len(value) < 2):
                return
            if kind == "host" and _keep_ip(value) and re.fullmatch(r"[\d.:]+", value):
                return   # an address given as a host: handled (or kept) as an address
            found[value] = kind

        for name, text in walk_strings(data):
            key = name.lower()
            if key in HOST_KEYS and text:
                add("host", text)
                if "." in text and not re.fullmatch(r"[\d.]+", text):
                    add("host", text.split(".", 1)[0])
            if key in USER_KEYS and text:
                add("user", text)
            claimed: list[tuple[int, int]] = []

            def free(a: int, b: int) -> bool:
                return all(b <= s or a >= e for s, e in claimed)

            for pat in _TOKEN_PATTERNS:
                for m in pat.finditer(text):
                    value = m.group("v")
                    if not re.search(r"[A-Za-z]", value) and len(value) < 16:
                        continue   # `#token: 24700`, `key=1`: a count, not a secret
                    if free(*m.span("v")):
                        claimed.append(m.span("v"))
                        add("token", m.group("v"))
            for m in _URL_USER.finditer(text):
                add("user", m.group("v"), shortest=1)
            for m in _EMAIL.finditer(text):
                if free(*m.span()):
                    claimed.append(m.span())
                    add("email", m.group(0))
            for m in _IPV6.finditer(text):
                value = m.group(0)
                if value.count(":") < 2 or not free(*m.span()):
                    continue
                try:
                    ipaddress.IPv6Address(value.split("%", 1)[0])
                except ValueError:
                    continue
                claimed.append(m.span())
                if not _keep_ip(value):
                    add("ip", value)
            for m in _IPV4.finditer(text):
                if not free(*m.span()):
                    continue
                try:
                    ipaddress.IPv4Address(m.group(0))
                except ValueError:
                    continue
                claimed.append(m.span())
                if not _keep_ip(m.group(0)):
                    add("ip", m.group(0))
            for m in _MAC.finditer(text):
                if free(*m.span()):
                    claimed.append(m.span())
                    add("mac", m.group(0))
            for pat in _USER_PATTERNS:
                for m in pat.finditer(text):
                    if free(*m.span("v")):
                        add("user", m.group("v"))
            for pat in _HOST_PATTERNS:
                for m in pat.finditer(text):
                    if free(*m.span("v")):
                        claimed.append(m.span("v"))
                        add("host", m.group("v"))
            for m in _FQDN.finditer(text):
                if free(*m.span("v")):
                    claimed.append(m.span("v"))
                    add("host", m.group("v"))
                    label = m.group("v").split(".", 1)[0]
                    if len(label) >= 3 and re.search(r"[\d-]", label):
                        add("host", label)   # `gpu-node-7` of `gpu-node-7.corp.example.com`
        return found

    def learn(self, data: Any) -> None:
        """Collect every value to redact in `data` and number the new ones by first appearance."""
        for literal, kind in self._candidates(data).items():
            self._literals.setdefault(literal, kind)
        # spellings already in the map (from a saved file) are redacted too
        for kind, values in self._map.items():
            for original in values:
                self._literals.setdefault(original, kind)
        self._compile()
        if self._pattern is None:
            return
        for _name, text in walk_strings(data):
            for m in self._pattern.finditer(text):
                self._pseudonym(self._kind_of(m), m.group(0))
        # values never seen again in the walk (cannot happen for collected ones) still get a name
        for literal, kind in sorted(self._literals.items(), key=lambda kv: (KINDS.index(kv[1]), kv[0])):
            self._pseudonym(kind, literal)

    def _pseudonym(self, kind: str, literal: str) -> str:
        key = _canon(kind, literal)
        table = self._map[kind]
        if key not in table:
            used = {int(v.rsplit("-", 1)[1]) for v in table.values() if re.fullmatch(rf"{kind}-\d+", v)}
            n = 1
            while n in used:
                n += 1
            table[key] = f"{kind}-{n}"
        return table[key]

    def _compile(self) -> None:
        if not self._literals:
            self._pattern = None
            return
        ordered = sorted(self._literals.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        parts = []
        self._kind_of_group = []
        for literal, kind in ordered:
            flags = "i" if kind in ("host", "email", "ip", "mac") else ""
            body = re.escape(literal)
            parts.append(f"(?{flags}:{body})" if flags else f"(?:{body})")
        alternation = "|".join(f"({p})" for p in parts)
        self._kind_of_group = [kind for _lit, kind in ordered]
        self._pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternation})(?![A-Za-z0-9])")

    def _kind_of(self, m: re.Match[str]) -> str:
        return self._kind_of_group[(m.lastindex or 1) - 1]

    # -- applying

    @property
    def mapping(self) -> RedactionMap:
        return RedactionMap({k: dict(v) for k, v in self._map.items()})

    def redact_text(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda m: self._pseudonym(self._kind_of(m), m.group(0)), text)

    def apply(self, data: T) -> T:
        """A copy of `data` (dataclasses, dicts, tuples, strings) with every learnt value replaced."""
        return _map_strings(data, self.redact_text)

    # -- checking

    def leaks(self, rendered: str, fmt: str) -> list[str]:
        """Kinds of original values still readable in a rendered report (empty when clean)."""
        if self._pattern is None:
            return []
        views = [rendered]
        if fmt == "html":
            views = [html.unescape(re.sub(r"<[^>]*>", " ", rendered))]
        elif fmt == "md":
            views.append(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", rendered))
        elif fmt == "json":
            views = ["\n".join(s for _n, s in walk_strings(json.loads(rendered)))]
        found: list[str] = []
        for view in views:
            for m in self._pattern.finditer(view):
                found.append(self._kind_of(m))
        return sorted(set(found))

    def check(self, rendered: str, fmt: str) -> None:
        kinds = self.leaks(rendered, fmt)
        if kinds:
            raise RedactionError(f"redaction incomplete: {', '.join(kinds)} values would remain in the {fmt} output; "
                                 "nothing was written")

"""Inputs: expand paths, globs, directories and `-` into sources; open compressed files; read line batches.

A source is read as bytes in large blocks split at line ends, decoded with replacement (counted), CRLF
and NUL bytes handled, and handed on as a polars frame of (`line`, `text`) rows.
"""

from __future__ import annotations

import bz2
import codecs
import glob
import gzip
import hashlib
import io
import lzma
import os
import re
import stat
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import polars as pl

from . import journalfile
from .ahead import ahead
from .store import is_store

BLOCK = 32 << 20  # bytes read per batch
ROTATED = re.compile(r"^(?P<base>.+?)(?:[.-](?P<n>\d+))?(?P<ext>\.(?:gz|bz2|xz|zst))?$")
COMPRESSED = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
JOURNAL = "journal"   # a binary systemd journal file, read through journalctl (forensics.journalfile)
MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


class SourceError(Exception):
    """A source could not be read; the message names it and says how to fix it."""


@dataclass(frozen=True)
class Source:
    path: str                 # as given (or `-` / `<stdin>`)
    real: Path | None         # None for stdin
    compression: str | None   # gzip, bzip2, xz, zstd or None
    mtime: float | None       # file mtime, or the gzip header mtime when set
    stdin_data: bytes | None = None
    encoding: str | None = None  # `utf-16-le` / `utf-16-be`: read through a transcoder to UTF-8; None: UTF-8
    in_dir: bool = False      # found in a directory given as an input (not named itself)

    @property
    def display(self) -> str:
        return "<stdin>" if self.real is None else self.path


@dataclass
class ReadStats:
    """Counts of what decoding had to repair, per source."""

    bytes: int = 0
    lines: int = 0
    invalid_utf8: int = 0   # lines that held invalid UTF-8 (decoded with U+FFFD)
    nul_bytes: int = 0      # NUL bytes replaced by U+FFFD... counted here
    hole_bytes: int = 0     # ... of which in runs of HOLE or more, each kept as one `U+FFFD<N NUL bytes>` marker
    crlf: int = 0           # lines that ended in CRLF
    ansi_lines: int = 0     # lines of a line format that held terminal escape sequences (taken out: `ansi`)
    pod_lines: int = 0      # lines behind kubectl's `[pod/NAME/CONTAINER] ` prefix (taken off: `podprefix`)
    # lines that may have been cut to a terminal's width: length -> (how many, the first) (`cutlines`)
    cut_lengths: dict[int, tuple[int, int]] = field(default_factory=dict)
    sha: "hashlib._Hash | None" = None
    long_lines: int = 0     # lines longer than MAX_LINE, cut to it
    long_first: int = 0     # ... the first of them
    long_bytes: int = 0     # ... the bytes left out of them
    index: ChunkIndex | None = None   # of a plain file's bytes (no compression, UTF-8), as they are read


class ChunkIndex:
    """Where each `chunk` of bytes given piece by piece (in any sizes) starts, and the 0-based number of the first
    line starting in it; the number of lines (sourcefile's index of a file's lines, `_chunk_index`)."""

    def __init__(self, chunk: int = 1 << 20) -> None:
        self.chunk = chunk
        self.starts: list[int] = []
        self.first: list[int] = []
        self.n = self.size = 0

    def add(self, buf: bytes) -> None:
        at = 0
        while at < len(buf):
            if self.size % self.chunk == 0:
                self.starts.append(self.size)
                self.first.append(self.n)
            take = min(len(buf) - at, self.chunk - self.size % self.chunk)
            self.n += buf.count(b"\n", at, at + take)
            self.size += take
            at += take

    def index(self) -> tuple[list[int], list[int], int]:
        return self.starts or [0], self.first or [0], self.n + 1


def rotation_key(path: str) -> tuple[str, int, str]:
    """Sort rotated logs oldest first: `syslog.2.gz`, `syslog.1`, `syslog`."""
    name = os.path.basename(path)
    m = ROTATED.match(name)
    base, n = (m.group("base"), int(m.group("n"))) if m and m.group("n") else (name, 0)
    if m and not m.group("n") and m.group("ext"):
        base = m.group("base")
    return (os.path.join(os.path.dirname(path), base), -n, path)


def expand(inputs: list[str], skipped: list[str] | None = None) -> tuple[list[Source], list[str]]:
    """Expand inputs to sources. Returns (sources, errors); errors name the input and the fix. A forensics store
    met inside a directory (`forensics ingest .` where `.forensics` is) is left out, and said in `skipped`."""
    out: list[Source] = []
    errors: list[str] = []
    for item in inputs:
        if item == "-":
            data = sys.stdin.buffer.read()
            out.append(Source("-", None, None, None, stdin_data=data, encoding=sniff_encoding(data[:SNIFF])))
            continue
        paths = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        if not paths:
            errors.append(f"{item}: no file matches this pattern; check the glob (quote it to let forensics expand it)")
            continue
        for p in paths:
            files, errs = _expand_path(p, skipped)
            out.extend(files)
            errors.extend(errs)
    seen: set[str] = set()
    unique = []
    for s in out:
        key = str(s.real.resolve()) if s.real else "-"
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique, errors


def _expand_path(p: str, skipped: list[str] | None = None) -> tuple[list[Source], list[str]]:
    path = Path(p)
    try:
        st = path.stat()
    except FileNotFoundError:
        return [], [f"{p}: no such file or directory; check the path"]
    except PermissionError:
        return [], [f"{p}: permission denied; run with access to it (e.g. sudo) or copy it readable"]
    if stat.S_ISDIR(st.st_mode):
        if is_store(p):
            return [], [f"{p}: a forensics store, not logs: its files are the tool's own; name the directory of the "
                        f"logs (a store inside it is left out)"]
        found = []
        for root, dirs, files in os.walk(p):
            stores = [d for d in dirs if is_store(os.path.join(root, d))]
            if stores and skipped is not None:
                skipped.extend(f"{os.path.join(root, d)}: a forensics store; its files are the tool's own, not logs"
                               for d in sorted(stores))
            dirs[:] = sorted(d for d in dirs if d not in stores)
            for f in files:
                if not f.startswith("."):
                    found.append(os.path.join(root, f))
        found.sort(key=rotation_key)
        if not found:
            return [], [f"{p}: directory holds no files to ingest; check the path"]
        srcs, errs = [], []
        for f in found:
            s, e = _expand_path(f)
            srcs.extend(replace(x, in_dir=True) for x in s)
            errs.extend(e)
        return srcs, errs
    if not stat.S_ISREG(st.st_mode):
        return [], [f"{p}: not a regular file (a FIFO, socket or device); copy its content to a file "
                     f"or pipe it to `forensics ingest -`"]
    if not os.access(p, os.R_OK):
        return [], [f"{p}: permission denied; run with access to it (e.g. sudo) or copy it readable"]
    comp = _compression(path)
    mtime = st.st_mtime
    if comp == "gzip":
        mtime = _gzip_mtime(path) or mtime
    src = Source(p, path, comp, mtime)
    if comp == JOURNAL:
        return [src], []   # journalctl's JSON is UTF-8; running it is the ingest's (a missing journalctl is its error)
    try:
        with open_binary(src) as fh:
            head = fh.read(SNIFF)
    except (*_STREAM_ERRORS, zlib_error()):
        return [src], []  # reading it reports the damage
    enc = sniff_encoding(head)
    return [replace(src, encoding=enc) if enc else src], []


SNIFF = 4096  # bytes looked at for the text's encoding


def read_text(path: str) -> str:
    """A whole file's text as ingest reads it: decompressed, UTF-16 transcoded, invalid UTF-8 replaced, a leading
    byte order mark dropped (for `forensics explain --file`). Raises SourceError naming the file."""
    srcs, errs = expand([path])
    if errs or not srcs:
        raise SourceError(errs[0] if errs else f"{path}: nothing to read")
    try:
        with open_binary(srcs[0]) as fh:
            data = fh.read()
    except (*_STREAM_ERRORS, zlib_error()) as e:
        raise SourceError(f"{path}: cannot read ({e})") from e
    return data.decode("utf-8", "replace").removeprefix("\ufeff")


def sniff_encoding(head: bytes) -> str | None:
    """`utf-16-le` or `utf-16-be` when the first bytes are UTF-16 text (Windows PowerShell 5's `>` and
    `Out-File` write UTF-16LE with a byte order mark; a file without the mark shows a NUL beside nearly every
    ASCII character), else None (UTF-8, or anything read as UTF-8 with replacement)."""
    if head.startswith(b"\xff\xfe") and not head.startswith(b"\xff\xfe\x00\x00"):
        return "utf-16-le"
    if head.startswith(b"\xfe\xff"):
        return "utf-16-be"
    n = len(head) // 2 * 2
    if n < 16:
        return None
    even, odd = head[0:n:2], head[1:n:2]
    half = n // 2
    if odd.count(0) >= 0.9 * half and even.count(0) <= 0.1 * half:
        return "utf-16-le"
    if even.count(0) >= 0.9 * half and odd.count(0) <= 0.1 * half:
        return "utf-16-be"
    return None


class Transcoded(io.RawIOBase):
    """A binary stream of UTF-16 text read as UTF-8 bytes (line ends are kept, so line numbers are the file's;
    a byte order mark becomes UTF-8's; an unpaired surrogate or a cut last character becomes U+FFFD)."""

    def __init__(self, raw: BinaryIO, encoding: str) -> None:
        super().__init__()
        self._raw = raw
        self._dec = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._buf = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def _fill(self, n: int) -> None:
        while (n < 0 or len(self._buf) < n) and not self._eof:
            chunk = self._raw.read(max(2 * n, 1 << 16) if n >= 0 else -1)
            if not chunk:
                self._buf += self._dec.decode(b"", final=True).encode("utf-8")
                self._eof = True
            else:
                self._buf += self._dec.decode(chunk).encode("utf-8", "replace")

    def read(self, n: int | None = -1) -> bytes:
        n = -1 if n is None else n
        self._fill(n)
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out

    read1 = read

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _compression(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(10)
    except OSError:
        return None
    if journalfile.is_journal(head):
        return JOURNAL
    for magic, name in MAGIC:
        if head.startswith(magic):
            if name == "bzip2" and not re.match(rb"BZh[1-9](\x31\x41\x59\x26\x53\x59|\x17\x72\x45\x38\x50\x90)",
                                                head):
                continue  # text that happens to start with `BZh`
            return name
    return None


def _gzip_mtime(path: Path) -> float | None:
    with open(path, "rb") as fh:
        head = fh.read(10)
    if len(head) < 10:
        return None
    (mt,) = struct.unpack("<I", head[4:8])
    return float(mt) if mt else None


def open_binary(src: Source) -> BinaryIO:
    """The source's bytes, decompressed, and as UTF-8 when its text is UTF-16."""
    fh = _open_raw(src)
    return Transcoded(fh, src.encoding) if src.encoding else fh  # type: ignore[return-value]


def _open_raw(src: Source) -> BinaryIO:
    if src.real is None:
        return io.BytesIO(src.stdin_data or b"")
    if src.compression == "gzip":
        return gzip.open(src.real, "rb")  # type: ignore[return-value]
    if src.compression == "bzip2":
        return bz2.open(src.real, "rb")  # type: ignore[return-value]
    if src.compression == "xz":
        return lzma.open(src.real, "rb")  # type: ignore[return-value]
    if src.compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(src.real, "rb"))  # type: ignore[return-value]
    if src.compression == JOURNAL:
        exe = journalfile.journalctl()
        if exe is None:
            raise SourceError(f"{src.display}: a binary systemd journal file, and journalctl (systemd's reader of "
                              "it) is not installed here; nothing ingested from it. Install systemd's journalctl, or "
                              f"on a machine with systemd run `journalctl --file {src.display} -o json --all > "
                              f"{src.real.name}.json` and ingest that file")
        return journalfile.JournalStream(src.real, exe)  # type: ignore[return-value]
    return open(src.real, "rb")


def head_bytes(src: Source, n: int = 256 << 10) -> bytes:
    """The first `n` bytes (decompressed), for format detection. A compressed stream that breaks after some
    bytes gives those (reading the source reports the break); one that gives none is an error."""
    try:
        with open_binary(src) as fh:
            data, err = _read_block(fh, n, src.compression)
    except (OSError, EOFError, lzma.LZMAError, zlib_error()) as e:
        data, err = b"", e
    if err is not None and not data:
        raise SourceError(f"{src.display}: cannot read ({err}); the file may be truncated or not what its "
                          f"name says") from err
    return data


_STREAM_ERRORS = (OSError, EOFError, lzma.LZMAError)


def _read_block(fh: BinaryIO, n: int, compression: str | None) -> tuple[bytes, BaseException | None]:
    """Up to `n` bytes, and the error that ended the stream early (None when it did not). Read piece by
    piece (read1), a decompressor hands out every byte it decoded before a cut or damaged stream; one
    read(n) would lose them with the error."""
    if compression not in ("gzip", "bzip2", "xz"):
        try:
            return fh.read(n), None
        except (*_STREAM_ERRORS, zlib_error()) as e:
            return b"", e
    parts: list[bytes] = []
    got = 0
    try:
        while got < n:
            piece = fh.read1(n - got)  # type: ignore[attr-defined]
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
    except (*_STREAM_ERRORS, zlib_error()) as e:
        return b"".join(parts), e
    return b"".join(parts), None


HOLE = 1 << 16  # a run of this many NUL bytes or more (a sparse file's hole) is kept as a short marker
MAX_LINE = 16 << 20  # a line longer than this is cut to it (a 10 MB line lands whole): no log line is, and a file
                     # with no newline (a binary, a one-line JSON export) was held whole, copied at every read


def _fill_holes(chunk: bytes, stats: ReadStats) -> bytes:
    """Each run of HOLE or more NUL bytes -> `U+FFFD<N NUL bytes>` (counted): a hole in a file copied
    half-written costs no memory, whatever its size. Shorter runs are decoded NUL by NUL."""
    if chunk.find(b"\x00" * HOLE) < 0:
        return chunk

    def mark(m: re.Match[bytes]) -> bytes:
        stats.nul_bytes += len(m.group())
        stats.hole_bytes += len(m.group())
        return _marker(len(m.group()))

    return _HOLE_RUN.sub(mark, chunk)


def _marker(n: int) -> bytes:
    return f"\ufffd<{n} NUL bytes>".encode()


def _join_holes(rest: bytes, chunk: bytes) -> bytes:
    """`rest + chunk`, with a hole that goes on across the two blocks as one marker."""
    tail = _HOLE_TAIL.search(rest, max(0, len(rest) - 40))
    head = _HOLE_HEAD.match(chunk)
    if tail is None or head is None:
        return rest + chunk
    return rest[:tail.start()] + _marker(int(tail.group(1)) + int(head.group(1))) + chunk[head.end():]


_HOLE_RUN = re.compile(b"\x00{%d,}" % HOLE)
_HOLE_TAIL = re.compile(_marker(0).replace(b"0", rb"(\d+)") + rb"\Z")
_HOLE_HEAD = re.compile(_marker(0).replace(b"0", rb"(\d+)"))


def read_batches(src: Source, stats: ReadStats, block: int = BLOCK) -> Iterator[pl.DataFrame]:
    """Yield frames of (`line` Int64 1-based, `text` String) in order, covering every line of the source.

    A reader thread reads, hashes and splits the next block while the caller works on this one (file reads,
    hashing and the splitter release the GIL); at most one block waits."""
    return ahead(lambda: _without_bom(_read_batches(src, stats, block)), name=f"read {src.display}")


def _without_bom(frames: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """The frames, line 1 without a leading byte order mark: it marks the encoding, and no format expects it
    before a stamp, a banner or a JSON object."""
    first = True
    for df in frames:
        if first and df.height:
            first = False
            head = df.get_column("text")[0] or ""
            if head.startswith("\ufeff"):
                df = df.with_columns(df.get_column("text").scatter(0, head[1:]))
        yield df


def _read_batches(src: Source, stats: ReadStats, block: int) -> Iterator[pl.DataFrame]:
    stats.sha = hashlib.sha256()
    index = stats.index = ChunkIndex() if src.real is not None and not src.compression and not src.encoding else None
    lineno = 1
    rest = b""
    try:
        fh = open_binary(src)
    except OSError as e:
        raise SourceError(f"{src.display}: cannot open ({e.strerror or e})") from e
    head: bytes | None = None   # the first MAX_LINE bytes of a line longer than that, while its rest is skipped
    with fh:
        while True:
            chunk, err = _read_block(fh, block, src.compression)
            if err is not None:
                # a cut or damaged compressed stream: keep every line read, report the rest as lost
                data = (_skip_long(head, chunk, stats) or head) if head is not None else rest + chunk
                if data:
                    stats.sha.update(chunk)
                    stats.bytes += len(chunk)
                    df = _cut_long(_decode(_fill_holes(data, stats), lineno, stats), stats)
                    lineno += df.height
                    yield df
                raise SourceError(f"{src.display}: line {lineno}: compressed stream ends early or is damaged "
                                  f"({err}); the {lineno - 1} line(s) before it were ingested (the last perhaps "
                                  f"cut short), the rest of the file is lost; re-copy the file to get it") from err
            if not chunk:
                break
            stats.sha.update(chunk)
            if index is not None:
                index.add(chunk)
            stats.bytes += len(chunk)
            nul = b"\x00" in chunk
            if nul:
                chunk = _fill_holes(chunk, stats)
            if head is not None:  # the rest of a long line: skipped up to its newline
                data = _skip_long(head, chunk, stats)
                if data is None:
                    continue
                head = None
            elif nul:
                data = _join_holes(rest, chunk)
            else:
                data = rest + chunk if rest else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE:
                    head, rest = _cut_line(data, lineno, stats), b""
                else:
                    rest = data
                continue
            rest = data[cut + 1:]
            df = _decode(data, lineno, stats, cut + 1)  # the whole lines: data[:cut + 1]
            lineno += df.height
            yield _cut_long(df, stats) if _may_hold_long(data, cut + 1) else df
    if head is not None or rest:
        yield _cut_long(_decode(head if head is not None else rest, lineno, stats), stats)


def _may_hold_long(data: bytes, end: int) -> bool:
    """Whether data[:end] may hold a line over MAX_LINE bytes: such a line covers a whole aligned half of
    MAX_LINE, so a newline in each of those (a few finds per read) rules it out."""
    half = MAX_LINE // 2
    return any(data.find(b"\n", a, a + half) < 0 for a in range(0, end - half + 1, half))


def _skip_long(head: bytes, chunk: bytes, stats: ReadStats) -> bytes | None:
    """The cut long line `head` and what follows its newline in `chunk`; None (all of `chunk` skipped, counted)
    when the line goes on past it."""
    nl = chunk.find(b"\n")
    stats.long_bytes += len(chunk) if nl < 0 else nl
    return None if nl < 0 else head + chunk[nl:]


def _cut_long(df: pl.DataFrame, stats: ReadStats) -> pl.DataFrame:
    """The batch with each line longer than MAX_LINE bytes cut to its first MAX_LINE (those whose newline came
    within the bytes read with them; a longer run is cut while it is read, `_cut_line`)."""
    at = (df.get_column("text").str.len_bytes() > MAX_LINE).arg_true()
    if not at.len():
        return df
    cut = [_cut_line(text.encode(), line, stats).decode("utf-8", errors="replace")
           for line, text in df[at].iter_rows()]
    return df.with_columns(df.get_column("text").scatter(at, pl.Series(cut, dtype=pl.String)))


def char_cut(data: bytes, limit: int) -> int:
    """How many of the first `limit` bytes of `data` (longer than that) end at a UTF-8 character's start."""
    end = limit
    while end > limit - 4 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return end


def _cut_line(data: bytes, lineno: int, stats: ReadStats) -> bytes:
    """The first MAX_LINE bytes of a line longer than that (at a character's start: a UTF-8 character is not
    split), counting what is left out."""
    end = char_cut(data, MAX_LINE)
    stats.long_lines += 1
    stats.long_first = stats.long_first or lineno
    stats.long_bytes += len(data) - end
    return data[:end]


def zlib_error() -> type[BaseException]:
    import zlib

    return zlib.error


BOM = b"\xef\xbb\xbf"
_CSV = dict(has_header=False, separator="\x00", quote_char=None, schema={"text": pl.String},
            truncate_ragged_lines=True, empty_string_is_null=False, raise_if_empty=False)


def _decode(data: bytes, first_line: int, stats: ReadStats, end: int | None = None) -> pl.DataFrame:
    """The lines in `data[:end]` (whole lines; a final newline does not make an extra empty line) -> frame."""
    end = len(data) if end is None else end
    if data.find(b"\x00", 0, end) >= 0:
        data = data[:end]
        stats.nul_bytes += data.count(b"\x00")
        data = data.replace(b"\x00", "\ufffd".encode())
        end = len(data)
    text = _split_fast(data, end, stats)
    if text is None:
        text = _split_exact(data[:end] if end < len(data) else data, stats)
    n = text.len()
    stats.lines += n
    return pl.DataFrame({"line": pl.int_range(first_line, first_line + n, eager=True, dtype=pl.Int64), "text": text})


def _split_fast(data: bytes, end: int, stats: ReadStats) -> pl.Series | None:
    """Split valid UTF-8 with the CSV reader (one column, no quoting); None when the result cannot be shown
    to be the exact split (invalid UTF-8, a lost row): the caller then splits the slow way."""
    try:
        text = pl.read_csv(data, **_CSV).to_series()  # type: ignore[arg-type]
    except Exception:  # invalid UTF-8 somewhere (a ComputeError), or anything else: the slow way
        return None
    body = end - 1 if data[end - 1:end] == b"\n" else end  # data[:body] holds the lines without the last newline
    if end < len(data):
        text = text.head(text.len() - 1)  # the partial line after `end` (always a row of its own)
    if data.startswith(BOM) and text.len():  # the reader drops a leading byte order mark: put it back
        text = text.scatter(0, "\ufeff" + (text[0] or ""))
    n = text.len()
    crlf = 0
    if data.find(b"\r", 0, end) >= 0:  # the reader strips the CR of a CRLF line end (one per line)
        crlf = data.count(b"\r\n", 0, end) + (body == end and data[end - 1:end] == b"\r")
        if n != data.count(b"\n", 0, body) + 1:  # and a CR is no line end of its own
            return None
    # every byte is accounted for (lengths + newlines + stripped CRs), so no line was dropped, and no row holds a
    # newline, so none were joined
    if text.str.len_bytes().sum() + (n - 1) + crlf != body or text.str.contains("\n", literal=True).any():
        return None
    stats.crlf += crlf
    return text.alias("text")


def _split_exact(data: bytes, stats: ReadStats) -> pl.Series:
    """Bytes holding whole lines -> text lines; the final newline does not make an extra empty line."""
    if data.endswith(b"\n"):
        data = data[:-1]
    raw = pl.Series("text", data.split(b"\n"), dtype=pl.Binary)
    try:
        text = raw.cast(pl.String)
    except Exception:
        lines = [b.decode("utf-8", "replace") for b in data.split(b"\n")]
        text = pl.Series("text", lines, dtype=pl.String)
        bad = sum(1 for b in data.split(b"\n") if _invalid(b))
        stats.invalid_utf8 += bad
    cr = text.str.ends_with("\r")
    ncr = int(cr.sum())
    if ncr:
        stats.crlf += ncr
        text = text.str.strip_suffix("\r")
    return text


def _invalid(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True

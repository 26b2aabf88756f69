"""The lines of an ingested file as they were when ingested: what a report quotes around its evidence.

A file is quoted only when its sha256 is the one ingested. Hashing a journal of hundreds of MB on every
report costs more than the rest of the report, so once a file has been verified its stat (device, inode,
size, mtime and ctime in ns) is kept with the sha256 and the first line of each 1 MiB chunk, in the store's
`profiles/files/`: while the stat is unchanged (as git trusts its index), the file is not hashed again and
only the chunks holding the cited lines are read. A changed stat is hashed again; a read-only store hashes
every time.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from . import journalfile
from .model import SourceInfo
from .sources import MAX_LINE, SNIFF, ChunkIndex, char_cut, sniff_encoding

MAX_CONTEXT_FILE = 256 * 1024 * 1024
CHUNK = 1 << 20


def _chunk_index(raw: bytes, chunk: int) -> tuple[list[int], list[int], int]:
    """(chunk starts, 0-based number of the first line starting in each chunk, number of lines)."""
    ix = ChunkIndex(chunk)
    ix.add(raw)
    return ix.index()


def _hash_index(path: Path) -> tuple[str, tuple[list[int], list[int], int], int]:
    """(sha256, `_chunk_index`, size) of a file, read a CHUNK at a time: a report's first look at a journal of
    hundreds of MB held all of it in memory."""
    h = hashlib.sha256()
    ix = ChunkIndex(CHUNK)
    with open(path, "rb") as fh:
        while buf := fh.read(CHUNK):
            h.update(buf)
            ix.add(buf)
    return h.hexdigest(), ix.index(), ix.size


def remember(path: Path, st: os.stat_result, sha256: str, index: ChunkIndex, cache: Path) -> None:
    """Keep what ingest learnt of a plain file while reading it (its sha256, its chunk index) as a verification,
    when the file's stat is still `st` (taken before it was read): the first report citing it then reads only
    the chunks it cites instead of hashing the whole file again."""
    if index.chunk == CHUNK:
        _keep_unchanged(path, st, cache / f"{_stat_key(path, st)}.json", sha256.lower(), index.index())


class FileLines(Sequence[str]):
    """The lines of a file's bytes (split at `\n`, `\r` stripped, invalid UTF-8 replaced), decoded only where
    asked: a report cites a few lines of files of millions. Newlines are counted per 1 MiB chunk once; a chunk
    is split when one of its lines is first asked for. Given `path` and its chunk index instead of the bytes,
    the bytes of a chunk's lines are read from the file when first asked for."""

    def __init__(self, raw: bytes | None, chunk: int = CHUNK, *, path: Path | None = None,
                 index: tuple[list[int], list[int], int] | None = None, size: int = 0) -> None:
        self.raw, self.path = raw, path
        self.starts, self.first, self.n = index if index is not None else _chunk_index(raw or b"", chunk)
        self.size = len(raw) if raw is not None else size
        self.split: dict[int, list[bytes]] = {}
        self.keep: object = None     # what must live as long as the lines (a temporary file holding them)

    def __len__(self) -> int:
        return self.n

    def _bytes(self, a: int, b: int) -> bytes:
        if self.raw is not None:
            return self.raw[a:b]
        assert self.path is not None
        with open(self.path, "rb") as fh:
            fh.seek(a)
            return fh.read(b - a)

    def _find_back(self, end: int) -> int:
        """The position after the last newline before `end` (0 when none), searched a CHUNK at a time."""
        pos = end
        while pos > 0:
            a = max(0, pos - CHUNK)
            k = self._bytes(a, pos).rfind(b"\n")
            if k >= 0:
                return a + k + 1
            pos = a
        return 0

    def _find_fwd(self, start: int) -> int:
        """The position of the first newline at or after `start` (the size when none)."""
        pos = start
        while pos < self.size:
            buf = self._bytes(pos, min(self.size, pos + CHUNK))
            k = buf.find(b"\n")
            if k >= 0:
                return pos + k
            pos += len(buf) or CHUNK
        return self.size

    def _lines(self, a: int, b: int) -> list[bytes]:
        """`self._bytes(a, b).split(b"\n")`, read a CHUNK at a time, each line cut to its first MAX_LINE bytes as
        ingest cut it (a line of hundreds of MB is not held to quote its neighbours)."""
        if b - a <= MAX_LINE:
            return self._bytes(a, b).split(b"\n")
        out: list[bytes] = []
        cur: list[bytes] = []
        held = 0
        pos = a
        while pos < b:
            buf = self._bytes(pos, min(b, pos + CHUNK))
            if not buf:
                break
            at = 0
            while True:
                nl = buf.find(b"\n", at)
                piece = buf[at:nl if nl >= 0 else len(buf)]
                if held < MAX_LINE + 4:   # what a cut at a character's start needs
                    cur.append(piece[:MAX_LINE + 4 - held])
                    held += len(cur[-1])
                if nl < 0:
                    break
                out.append(_cut(b"".join(cur)))
                cur, held, at = [], 0, nl + 1
            pos += len(buf)
        out.append(_cut(b"".join(cur)))
        return out

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - int -> str, slice -> list[str]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        c = bisect.bisect_right(self.first, i) - 1
        while c > 0 and self.first[c] == self.first[c - 1]:  # a chunk no line starts in (one long line)
            c -= 1
        if c not in self.split:
            # from the first line starting in chunk c (after the last newline before it) to the end of c's lines
            a = self._find_back(self.starts[c]) if c else 0
            nxt = c + 1
            while nxt < len(self.starts) and self.first[nxt] == self.first[c]:
                nxt += 1
            b = self._find_fwd(self.starts[nxt] - 1) if nxt < len(self.starts) else self.size
            self.split[c] = self._lines(a, b)
        return self.split[c][i - self.first[c]].decode("utf-8", errors="replace").rstrip("\r")


def _cut(line: bytes) -> bytes:
    """A line cut to its first MAX_LINE bytes at a character's start, as ingest cuts it (`sources._cut_line`)."""
    return line if len(line) <= MAX_LINE else line[:char_cut(line, MAX_LINE)]


def _stat_key(path: Path, st: os.stat_result) -> str:
    key = f"{os.path.realpath(path)}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _known(note: Path | None, sha256: str) -> tuple[list[int], list[int], int] | None:
    """The chunk index kept for this stat, when the file then hashed to `sha256`."""
    if note is None:
        return None
    try:
        d = json.loads(note.read_text())
        if d.get("sha256") == sha256 and d.get("chunk") == CHUNK:
            return d["starts"], d["first"], int(d["lines"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _keep_unchanged(path: Path, st: os.stat_result, note: Path | None, sha256: str,
                    index: tuple[list[int], list[int], int]) -> None:
    """`_keep`, when the file's stat is still `st` (taken before it was read: it did not change while read)."""
    try:
        if note is not None and _stat_key(path, os.stat(path)) == _stat_key(path, st):
            _keep(note, sha256, index)
    except OSError:
        pass


def _keep(note: Path | None, sha256: str, index: tuple[list[int], list[int], int]) -> None:
    if note is None:
        return
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f".{note.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps({"sha256": sha256, "chunk": CHUNK, "starts": index[0], "first": index[1],
                                   "lines": index[2]}))
        os.replace(tmp, note)
    except OSError:  # a read-only store: hashed again next time
        pass


def read_source_file(src: SourceInfo, cache: Path | None = None) -> Sequence[str] | None:
    """The lines of `src` as ingested, or None when the file is gone, too large, or its sha256 differs.
    `cache` (a directory, the store's `profiles/files`): where verified stats are kept."""
    path = Path(src.path)
    try:
        if not path.is_file():
            return None
        st = path.stat()
        if st.st_size > MAX_CONTEXT_FILE:
            return None
        with open(path, "rb") as fh:
            if journalfile.is_journal(fh.read(len(journalfile.MAGIC))):
                return _journal_lines(path, src.sha256)
        plain = path.suffix not in (".gz", ".zst")
        note = cache / f"{_stat_key(path, st)}.json" if cache is not None and plain and src.sha256 else None
        index = _known(note, src.sha256.lower()) if note is not None else None
        if index is not None:
            return FileLines(None, path=path, index=index, size=st.st_size)
        if plain:
            with open(path, "rb") as fh:
                head = fh.read(SNIFF)
            if not sniff_encoding(head):  # hashed and indexed a chunk at a time, its lines read when cited
                digest, index, size = _hash_index(path)
                if not src.sha256 or not digest.startswith(src.sha256.lower()):
                    return None
                _keep_unchanged(path, st, note, src.sha256.lower(), index)
                return FileLines(None, path=path, index=index, size=size)
        raw = path.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(raw).hexdigest()
    if not src.sha256 or not digest.startswith(src.sha256.lower()):
        return None
    try:
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        elif path.suffix == ".zst":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    except Exception:  # noqa: BLE001 - a source we cannot reopen only loses its context lines
        return None
    enc = sniff_encoding(raw[:SNIFF])
    if enc:  # UTF-16 text, read as ingest read it (as UTF-8); no chunk index kept: its offsets are the file's
        raw, note = raw.decode(enc, "replace").removeprefix("\ufeff").encode("utf-8", "replace"), None
    lines = FileLines(raw)
    _keep_unchanged(path, st, note, src.sha256.lower(), (lines.starts, lines.first, lines.n))
    return lines


def _journal_lines(path: Path, sha256: str) -> Sequence[str] | None:
    """A binary journal file's lines as ingest read them: what journalctl prints for it (forensics.journalfile),
    when the file is the one ingested."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if not sha256 or not h.hexdigest().startswith(sha256.lower()):
        return None
    tmp = tempfile.NamedTemporaryFile(prefix="forensics-journal-", suffix=".json")  # noqa: SIM115 - kept below
    if not journalfile.write_all(path, tmp):
        tmp.close()
        return None
    tmp.flush()
    _, index, size = _hash_index(Path(tmp.name))
    lines = FileLines(None, path=Path(tmp.name), index=index, size=size)
    lines.keep = tmp   # the text lives as long as its lines: deleted when they are
    return lines

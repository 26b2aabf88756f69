"""The cited lines of an ingested file (forensics/sourcefile.py): read from the file only while it is the file
ingested, hashed once per stat, and only the chunks holding the cited lines read after that."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import journalfile, sourcefile
from forensics.model import SourceInfo
from forensics.sourcefile import FileLines, read_source_file


def _src(p: Path) -> SourceInfo:
    return SourceInfo(path=str(p), sha256=hashlib.sha256(p.read_bytes()).hexdigest(), format="syslog",
                      confidence=1.0, host=None, records=0, unparsed=0, first_ts=None, last_ts=None, time_anchor="")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=16), st.integers(min_value=1, max_value=9))
def test_file_backed_lines_are_the_lines_of_the_file(tmp_path_factory: pytest.TempPathFactory, raw: bytes,
                                                     chunk: int, step: int) -> None:
    """Reading the lines' chunks from the file gives what the bytes in memory give: lines longer than a chunk
    (and than the search step), CRLF, invalid UTF-8, no final newline."""
    p = tmp_path_factory.mktemp("fl") / "f.log"
    p.write_bytes(raw)
    want = [line.rstrip("\r") for line in raw.decode("utf-8", errors="replace").split("\n")]
    old = sourcefile.CHUNK
    sourcefile.CHUNK = step  # the step of the searches for a line's ends in the file
    try:
        lines = FileLines(None, path=p, index=sourcefile._chunk_index(raw, chunk), size=len(raw))
        assert len(lines) == len(want) and [lines[i] for i in range(len(want))] == want
    finally:
        sourcefile.CHUNK = old


def test_a_verified_file_is_not_hashed_again_while_its_stat_is_the_same(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "j.log"
    p.write_text("".join(f"line {i}\n" for i in range(100_000)))
    src, cache = _src(p), tmp_path / "store" / "profiles" / "files"
    first = read_source_file(src, cache)
    assert first is not None and first[77_777] == "line 77777"
    assert len(list(cache.iterdir())) == 1

    def no_read(*_a: object) -> None:
        raise AssertionError("read (and hashed) again")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    monkeypatch.setattr(sourcefile, "_hash_index", no_read)
    again = read_source_file(src, cache)
    assert again is not None and again[77_777] == "line 77777" and len(again) == len(first)
    assert again.raw is None  # read a chunk at a time, not the whole file
    monkeypatch.undo()
    # the same size, other bytes, a later mtime: hashed again, and no longer the ingested file
    p.write_text(p.read_text().replace("line 5\n", "line X\n"))
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert read_source_file(src, cache) is None


def test_another_sha256_for_the_same_stat_is_not_trusted(tmp_path: Path) -> None:
    p = tmp_path / "j.log"
    p.write_text("a\nb\n")
    src, cache = _src(p), tmp_path / "files"
    assert read_source_file(src, cache) is not None
    assert read_source_file(replace(src, sha256="0" * 64), cache) is None


def test_a_read_only_cache_hashes_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "j.log"
    p.write_text("a\nb\n")

    def refuse(*_a: object, **_k: object) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(sourcefile.os, "replace", refuse)
    cache = tmp_path / "files"
    assert list(read_source_file(_src(p), cache) or [])[:2] == ["a", "b"]
    assert not any(cache.glob("*.json"))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=16))
def test_a_file_is_hashed_and_indexed_a_chunk_at_a_time(tmp_path_factory: pytest.TempPathFactory, raw: bytes,
                                                         chunk: int) -> None:
    """The first read of a plain file does not hold its bytes: its sha256 and chunk index, computed while it is
    read a chunk at a time, are those of the whole bytes, and its lines the file's."""
    p = tmp_path_factory.mktemp("hx") / "f.log"
    p.write_bytes(raw)
    old = sourcefile.CHUNK
    sourcefile.CHUNK = chunk
    try:
        assert sourcefile._hash_index(p) == (hashlib.sha256(raw).hexdigest(), sourcefile._chunk_index(raw, chunk),
                                            len(raw))
        if sourcefile.sniff_encoding(raw[:sourcefile.SNIFF]):
            return  # UTF-16: decoded whole, as ingest read it
        if journalfile.is_journal(raw[:len(journalfile.MAGIC)]):
            return  # a binary journal file's magic (hypothesis finds the constant): read through journalctl
        lines = read_source_file(_src(p))
        assert lines is not None and isinstance(lines, FileLines) and lines.raw is None
        assert list(lines) == [x.rstrip("\r") for x in raw.decode("utf-8", errors="replace").split("\n")]
    finally:
        sourcefile.CHUNK = old


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=16), st.lists(st.integers(0, 40), max_size=12))
def test_the_index_of_bytes_given_in_pieces_is_the_index_of_the_bytes(raw: bytes, chunk: int, cuts: list[int]) -> None:
    from forensics.sources import ChunkIndex

    ix = ChunkIndex(chunk)
    at = 0
    for n in [*cuts, len(raw)]:
        ix.add(raw[at:at + n])
        at += n
    assert ix.index() == sourcefile._chunk_index(raw, chunk) and ix.size == len(raw)


def test_a_file_ingest_read_is_not_hashed_by_the_first_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest keeps a plain file's sha256 and chunk index as a verification (as a report's first read does): the
    report then reads only the chunks it cites. A file that changed while ingest read it is not vouched for."""
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    p = tmp_path / "j.log"
    p.write_text("".join(f"2025-05-25T20:17:{i % 60:02d}+00:00 node-1 app[7]: line {i}\n" for i in range(60_000)))
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(p)], IngestOptions()).failed
    (entry,) = store.sources()

    def no_read(*_a: object) -> None:
        raise AssertionError("read (and hashed) again")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    monkeypatch.setattr(sourcefile, "_hash_index", no_read)
    lines = read_source_file(entry, store.cache_dir / "files")
    assert lines is not None and lines.raw is None and len(lines) == 60_001
    assert lines[54_321] == "2025-05-25T20:17:21+00:00 node-1 app[7]: line 54321"
    monkeypatch.undo()
    # a file touched while ingest reads it (its stat then is not the one taken before): nothing kept
    import forensics.sources as sources

    q = tmp_path / "k.log"
    q.write_text(p.read_text())
    real_open = sources.open_binary

    def touched(src):  # noqa: ANN001, ANN202
        fh = real_open(src)
        st = q.stat()
        os.utime(q, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return fh

    other = Store(tmp_path / "t")
    monkeypatch.setattr(sources, "open_binary", touched)
    assert not ingest(other, [str(q)], IngestOptions()).failed
    monkeypatch.undo()
    assert not list((other.cache_dir / "files").glob("*.json"))
    again = Store(tmp_path / "u")
    assert not ingest(again, [str(q)], IngestOptions()).failed
    assert len(list((again.cache_dir / "files").glob("*.json"))) == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"\n", b"\xc3\xa9", b"\xe2\x82\xac", b"\r"]), max_size=120),
       st.integers(min_value=1, max_value=16), st.integers(min_value=4, max_value=12))
def test_a_long_line_is_read_cut_as_ingest_cut_it(tmp_path_factory: pytest.TempPathFactory, parts: list[bytes],
                                                   chunk: int, limit: int) -> None:
    """A line longer than MAX_LINE is read only as far as its first MAX_LINE bytes (at a character's start, as
    ingest cuts it): quoting the neighbours of a 300 MB line read all of it (a report at 746 MiB)."""
    raw = b"".join(parts)
    p = tmp_path_factory.mktemp("ll") / "f.log"
    p.write_bytes(raw)

    def cut(line: bytes) -> bytes:
        if len(line) <= limit:
            return line
        end = limit
        while end > limit - 4 and (line[end] & 0xC0) == 0x80:
            end -= 1
        return line[:end]

    want = [cut(x).decode("utf-8", errors="replace").rstrip("\r") for x in raw.split(b"\n")]
    old = sourcefile.CHUNK, sourcefile.MAX_LINE
    sourcefile.CHUNK, sourcefile.MAX_LINE = chunk, limit
    try:
        lines = FileLines(None, path=p, index=sourcefile._chunk_index(raw, chunk), size=len(raw))
        assert list(lines) == want
    finally:
        sourcefile.CHUNK, sourcefile.MAX_LINE = old

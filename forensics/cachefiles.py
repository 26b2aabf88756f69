"""Files kept in a store's cache directory (`profiles/`): written atomically, and only a few generations kept.

A generation is the files of one key, `<family>~<key>.<part>...` (the key a digest of what they derive from).
A reader that finds a file finds it whole (written under a temporary name, then renamed); a read-only store keeps
nothing and answers all the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path


def code_digest(*modules: str) -> str:
    """A digest of these source files (a module's `__file__`): named into a cache file, it keeps a changed
    computation from reading what an older one kept."""
    h = hashlib.sha256()
    for m in modules:
        h.update(Path(m).read_bytes())
    return h.hexdigest()[:16]


def stamps(files: Iterable[Path]) -> str | None:
    """The name, size and modification time of each file, what a cache derived from them is named after (None
    when one is gone)."""
    out = []
    try:
        for f in files:
            st = f.stat()
            out.append(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\0")
    except OSError:
        return None
    return "".join(out)


def write_atomic(files: Sequence[tuple[Path, Callable[[Path], object]]]) -> bool:
    """Write each (path, writer) by `writer(temporary path)`, then rename them into place in the given order (the
    one readers look for last); False, leaving nothing behind, when the directory cannot be written."""
    if not files:
        return True
    tag = uuid.uuid4().hex
    tmps = [p.with_name(f".{p.name}.{tag}.tmp") for p, _ in files]
    try:
        files[0][0].parent.mkdir(exist_ok=True)
        for (_, write), tmp in zip(files, tmps):
            write(tmp)
        for (path, _), tmp in zip(files, tmps):
            os.replace(tmp, path)
    except OSError:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        return False
    return True


def generation(path: Path) -> str:
    """`narrow~KEY.parquet`, `tables~KEY.spans.parquet` -> the generation `narrow~KEY`, `tables~KEY`."""
    return path.name.split(".")[0]


def prune(directory: Path, family: str, current: str, kept: int) -> None:
    """Drop all but the newest `kept` generations of `family` (by their files' times; `current` is kept)."""
    newest: dict[str, float] = {}
    for p in directory.glob(f"{family}~*"):
        g = generation(p)
        newest[g] = max(newest.get(g, 0.0), _mtime(p))
    old = sorted((g for g in newest if g != current), key=lambda g: newest[g], reverse=True)[max(kept - 1, 0):]
    for g in old:
        for p in directory.glob(f"{g}.*"):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


PRIVATE_ENV = "FORENSICS_CACHE_DIR"   # where `private_dir` is, instead of the system's temporary directory


def private_dir() -> Path | None:
    """A directory of this user's own for caches that are read back as code or objects (a rule set, pickled): in
    the system's temporary directory (or `$FORENSICS_CACHE_DIR`), made with mode 0700 and used only while it is
    a directory owned by this user that nobody else may write or read, as Jinja checks of its bytecode cache's.
    None when there is no such directory: the caller computes what it would have read."""
    base = os.environ.get(PRIVATE_ENV) or os.path.join(tempfile.gettempdir(), f"forensics-{os.getuid()}")
    path = Path(base)
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (a pack file of a few kB: cheap, and exact); raises OSError."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pickle_path(family: str, what: Sequence[object]) -> Path | None:
    """Where an object derived from `what` (what it is read from and with: files' digests, the code's, versions) is
    pickled in the private directory, `<family>~<digest of what>.pickle`; None when there is no private directory."""
    d = private_dir()
    if d is None:
        return None
    return d / f"{family}~{hashlib.sha256(json.dumps(list(what), default=str).encode()).hexdigest()[:32]}.pickle"


def read_pickled(path: Path) -> object | None:
    """What `keep_pickled` pickled at `path` (in a directory only this user may write: `private_dir`), or None:
    not kept yet, being replaced, or written by another version."""
    try:
        with path.open("rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
        return None


def keep_pickled(obj: object, path: Path, kept: int) -> None:
    """Pickle `obj` at `path` (`<family>~<key>.pickle`, written atomically); only the newest `kept` generations of
    its family stay."""
    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)

    if write_atomic([(path, write)]):
        prune(path.parent, path.name.split("~", 1)[0], generation(path), kept)

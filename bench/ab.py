"""Run the `forensics` command line from another source tree, for an A/B against the installed code in the same hour.

    git worktree add /tmp/base <commit>
    .venv/bin/python bench/ab.py /tmp/base --store S report --incident 2025-05-26 -o /dev/null   # the base
    .venv/bin/python -m forensics.cli --store S report --incident 2025-05-26 -o /dev/null        # this tree

`PYTHONPATH=/tmp/base` does not do it: the virtualenv's editable install puts a finder in `sys.meta_path`, ahead of
the path, so `import forensics` would still load this tree. This script takes that finder out, puts the given tree
first on the path, checks where `forensics` came from, and runs its CLI with the remaining arguments.

The tree's bytecode is written first, as `make` writes this tree's (`compileall`, only what is stale): where
PYTHONDONTWRITEBYTECODE is set, as on this VM, a fresh worktree's modules were otherwise compiled from source on
every run, 0.12-0.2 s of each report, which until the forty-fifth session counted against the base in every A/B.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    src = Path(argv[0]).resolve()
    if not (src / "forensics" / "__init__.py").is_file():
        sys.exit(f"bench/ab.py: {src} holds no forensics package (give the root of a checkout or worktree)")
    compileall.compile_dir(str(src / "forensics"), quiet=2)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f) and "editable" not in type(f).__module__]
    sys.path.insert(0, str(src))
    import forensics
    from forensics.cli import main as cli

    if not Path(forensics.__file__).resolve().is_relative_to(src):
        sys.exit(f"bench/ab.py: forensics was loaded from {forensics.__file__}, not from {src}")
    sys.argv = ["forensics", *argv[1:]]
    cli()


if __name__ == "__main__":
    main(sys.argv[1:])

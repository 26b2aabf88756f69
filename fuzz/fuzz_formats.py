"""atheris harness: format detection and every parser, forced, with the line batch cut anywhere (the first
byte picks the cut and the extra formats tried). See fuzz/README.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

if __name__ == "__main__":
    common.fuzz_main(common.check_formats)

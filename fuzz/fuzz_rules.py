"""atheris harness: the rule engine. An input starting like a pack file (`#`, `pack:`, `rules:` ...) is a rule
pack (loads, or fails with RulePackError naming the file); any other input is log text whose records the
built-in rules match, the vectorised and the general path giving the same events. See fuzz/README.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

if __name__ == "__main__":
    common.fuzz_main(common.check_rules)

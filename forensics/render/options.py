"""What a report is rendered with: one frozen value, passed from the command line to the renderer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from forensics import __version__
from forensics.model import SourceInfo
from forensics.render.sandbox import SECONDS as TEMPLATE_SECONDS

Format = Literal["md", "html", "json"]
FORMATS: tuple[str, ...] = ("md", "html", "json")

GITHUB_COMMENT_LIMIT = 65_536

# Gives the lines of a source file as ingested, or None when it cannot (file gone, sha256 differs).
SourceReader = Callable[[SourceInfo], Sequence[str] | None]


@dataclass(frozen=True)
class ReportOptions:
    tz: str = "UTC"                           # IANA zone shown beside UTC
    max_chars: int = GITHUB_COMMENT_LIMIT     # Markdown only; 0 = no limit
    template_dir: Path | None = None          # user templates, rendered in a sandbox
    template_seconds: float = TEMPLATE_SECONDS  # time the user templates of one report may take, in all
    redact: bool = False
    redact_map: Path | None = None            # JSON mapping read (if present) and written back
    generated_at: str | None = None           # printed only when given
    tool_version: str = __version__
    rulepack_versions: Mapping[str, str] = field(default_factory=dict)
    context_lines: int = 2                    # lines shown around each cited line, when the source is readable
    source_reader: SourceReader | None = field(default=None, compare=False, repr=False)

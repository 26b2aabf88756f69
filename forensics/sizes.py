"""Sizes printed for people: the templates' size specs (`{anon_rss_kb:kB}` -> `479.6 GiB`)."""

from __future__ import annotations

# a template's spec -> the value's unit in bytes: kB as the kernel prints it (KiB), or bytes
SIZE_SPECS = {"kB": 1024, "B": 1}
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_size(n_bytes: float) -> str:
    """`514915954688` -> `479.6 GiB`; below 1 KiB, whole bytes (`512 B`)."""
    v, i = float(n_bytes), 0
    while abs(v) >= 1024 and i < len(_UNITS) - 1:
        v, i = v / 1024, i + 1
    return f"{int(v)} B" if i == 0 else f"{v:.1f} {_UNITS[i]}"


def format_value(value: object, spec: str) -> str:
    """`format(value, spec)`, with the size specs: `(502847612, "kB")` -> `479.6 GiB`. A value that is not a
    number raises TypeError or ValueError, as `format` does; callers print it as is."""
    factor = SIZE_SPECS.get(spec)
    if factor is None:
        return format(value, spec)
    if isinstance(value, bool):
        raise TypeError("a boolean is not a size")
    return human_size(float(value) * factor)  # type: ignore[arg-type]

"""Byte-size conversions."""

from convert.units_table import UNITS


def to_bytes(value: float, unit: str) -> int:
    """``value`` in ``unit`` as a whole number of bytes; KeyError for an unknown unit."""
    return round(value * UNITS[unit])


def human(size: int) -> str:
    """The largest decimal unit that keeps the number at least 1: 1500 -> "1.5 kB"."""
    for symbol in ("GB", "MB", "kB"):
        if size >= UNITS[symbol]:
            return f"{size / UNITS[symbol]:.1f} {symbol}"
    return f"{size} B"

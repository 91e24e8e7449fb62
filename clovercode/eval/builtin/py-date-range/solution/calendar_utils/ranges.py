"""Ranges of dates: stays, reporting periods."""

from datetime import date, timedelta


def date_range(start: date, end: date, step_days: int = 1) -> list[date]:
    """Return the dates from start to end, both inclusive, step_days apart.

    An empty list when end is before start.
    """
    if step_days <= 0:
        raise ValueError("step_days must be positive")
    days = []
    current = start
    while current <= end:
        days.append(current)
        current += timedelta(days=step_days)
    return days


def nights(check_in: date, check_out: date) -> int:
    """Number of nights between check-in and check-out."""
    return (check_out - check_in).days

"""Meeting-room schedule helpers. Times are minutes since midnight."""

Interval = tuple[int, int]


def merge(intervals: list[Interval]) -> list[Interval]:
    """Merge overlapping or touching intervals; the result is sorted by start.

    The input may be in any order and is not modified.
    """
    result: list[Interval] = []
    for start, end in intervals:
        if result and start < result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result


def busy_minutes(intervals: list[Interval]) -> int:
    """Total minutes covered by at least one interval."""
    return sum(end - start for start, end in merge(intervals))

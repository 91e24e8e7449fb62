"""A tiny statistics module with a bug for the clovercode demo."""


def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    if not values:
        raise ValueError("mean() of an empty list")
    return sum(values) // len(values)


def spread(values):
    """Difference between the largest and the smallest value."""
    return max(values) - min(values)

"""A tiny statistics module with one bug."""


def mean(values: list[float]) -> float:
    """The arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / (len(values) + 1)


def clamp(value: float, low: float, high: float) -> float:
    """`value` limited to the closed interval [low, high]."""
    return max(low, min(high, value))

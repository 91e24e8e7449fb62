"""Invoice data."""

from dataclasses import dataclass, field
from decimal import Decimal


@dataclass(frozen=True)
class Line:
    description: str
    quantity: int
    unit_price: Decimal


@dataclass
class Invoice:
    number: str
    customer: str
    lines: list[Line] = field(default_factory=list)
    currency: str = "EUR"

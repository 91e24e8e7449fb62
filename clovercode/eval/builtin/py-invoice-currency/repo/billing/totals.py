"""Invoice arithmetic."""

from decimal import Decimal

from billing.models import Invoice


def total(invoice: Invoice) -> Decimal:
    return sum((line.unit_price * line.quantity for line in invoice.lines), Decimal("0"))

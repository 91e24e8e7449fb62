"""Invoices to and from JSON-ready dicts (stored in the documents table)."""

from decimal import Decimal

from billing.models import Invoice, Line


def to_dict(invoice: Invoice) -> dict:
    return {
        "number": invoice.number,
        "customer": invoice.customer,
        "currency": invoice.currency,
        "lines": [{"description": l.description, "quantity": l.quantity, "unit_price": str(l.unit_price)}
                  for l in invoice.lines],
    }


def from_dict(data: dict) -> Invoice:
    lines = [Line(l["description"], int(l["quantity"]), Decimal(l["unit_price"])) for l in data["lines"]]
    return Invoice(data["number"], data["customer"], lines, data.get("currency", "EUR"))

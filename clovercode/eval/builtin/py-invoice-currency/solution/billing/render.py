"""Plain-text invoices for e-mail."""

from billing.models import Invoice
from billing.totals import total


def render_invoice(invoice: Invoice) -> str:
    rows = [f"Invoice {invoice.number} for {invoice.customer}"]
    for line in invoice.lines:
        rows.append(f"  {line.quantity} x {line.description} @ {line.unit_price:.2f}")
    rows.append(f"Total: {total(invoice):.2f} {invoice.currency}")
    return "\n".join(rows)

import json
import unittest
from decimal import Decimal

from billing.models import Invoice, Line
from billing.render import render_invoice
from billing.serialize import from_dict, to_dict


def sample(**kw):
    return Invoice("2024-001", "ACME", [Line("Widget", 2, Decimal("3.75")), Line("Setup", 1, Decimal("5.00"))], **kw)


class CurrencyTest(unittest.TestCase):
    def test_default_is_eur(self):
        self.assertEqual(sample().currency, "EUR")
        self.assertEqual(Invoice("1", "x").currency, "EUR")

    def test_render_shows_currency(self):
        self.assertEqual(render_invoice(sample(currency="USD")).splitlines()[-1], "Total: 12.50 USD")
        self.assertEqual(render_invoice(sample()).splitlines()[-1], "Total: 12.50 EUR")

    def test_serialize(self):
        data = to_dict(sample(currency="GBP"))
        self.assertEqual(data["currency"], "GBP")
        self.assertEqual(from_dict(json.loads(json.dumps(data))), sample(currency="GBP"))

    def test_old_documents_load_as_eur(self):
        data = to_dict(sample())
        del data["currency"]
        self.assertEqual(from_dict(data).currency, "EUR")


if __name__ == "__main__":
    unittest.main()

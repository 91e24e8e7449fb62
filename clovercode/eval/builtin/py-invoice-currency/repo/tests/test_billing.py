import unittest
from decimal import Decimal

from billing.models import Invoice, Line
from billing.render import render_invoice
from billing.serialize import from_dict, to_dict


def sample():
    return Invoice("2024-001", "ACME", [Line("Widget", 2, Decimal("3.75")), Line("Setup", 1, Decimal("5.00"))])


class BillingTest(unittest.TestCase):
    def test_render(self):
        self.assertTrue(render_invoice(sample()).startswith("Invoice 2024-001 for ACME"))

    def test_round_trip(self):
        self.assertEqual(from_dict(to_dict(sample())), sample())


if __name__ == "__main__":
    unittest.main()

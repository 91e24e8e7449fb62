import unittest

from netkit.client import fetch_status


class ClientTest(unittest.TestCase):
    def test_passes_through(self):
        self.assertEqual(fetch_status(lambda url: 200, "http://example.invalid"), 200)


if __name__ == "__main__":
    unittest.main()

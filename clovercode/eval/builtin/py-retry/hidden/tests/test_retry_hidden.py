import unittest

from netkit.client import fetch_status
from netkit.retry import retry


class Flaky:
    def __init__(self, failures, exc=ConnectionError):
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self, *args):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"failure {self.calls}")
        return "ok"


class RetryTest(unittest.TestCase):
    def test_succeeds_after_failures(self):
        flaky, waits = Flaky(2), []
        wrapped = retry(times=3, delay=1.0, sleep=waits.append)(flaky)
        self.assertEqual(wrapped(), "ok")
        self.assertEqual(flaky.calls, 3)
        self.assertEqual(waits, [1.0, 2.0])

    def test_gives_up_with_last_exception(self):
        flaky, waits = Flaky(5), []
        wrapped = retry(times=3, delay=0.5, backoff=3, sleep=waits.append)(flaky)
        with self.assertRaisesRegex(ConnectionError, "failure 3"):
            wrapped()
        self.assertEqual(waits, [0.5, 1.5])

    def test_other_exceptions_propagate_at_once(self):
        flaky = Flaky(1, exc=KeyError)
        wrapped = retry(times=3, exceptions=(ConnectionError,), sleep=lambda s: None)(flaky)
        with self.assertRaises(KeyError):
            wrapped()
        self.assertEqual(flaky.calls, 1)

    def test_arguments_and_metadata(self):
        @retry(times=2, sleep=lambda s: None)
        def add(a, b=0):
            """Adds."""
            return a + b
        self.assertEqual(add(1, b=2), 3)
        self.assertEqual((add.__name__, add.__doc__), ("add", "Adds."))

    def test_times_must_be_positive(self):
        with self.assertRaises(ValueError):
            retry(times=0)

    def test_client_retries_connection_errors(self):
        flaky = Flaky(2)
        self.assertEqual(fetch_status(flaky, "http://example.invalid"), "ok")
        self.assertEqual(flaky.calls, 3)


if __name__ == "__main__":
    unittest.main()

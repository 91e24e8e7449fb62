import unittest

from accounts.profile import ProfileError, change_email
from accounts.signup import SignupError, sign_up
from accounts.store import AccountStore


class AccountsTest(unittest.TestCase):
    def setUp(self):
        self.store = AccountStore()

    def test_sign_up_normalises(self):
        self.assertEqual(sign_up(self.store, " Ada@Example.org ", "s3cret-pass")["email"], "ada@example.org")

    def test_sign_up_rejects_bad_email(self):
        with self.assertRaises(SignupError):
            sign_up(self.store, "ada@", "s3cret-pass")

    def test_change_email(self):
        sign_up(self.store, "ada@example.org", "s3cret-pass")
        self.assertEqual(change_email(self.store, "ada@example.org", "ada@math.example.org")["email"], "ada@math.example.org")

    def test_change_email_rejects_bad_email(self):
        sign_up(self.store, "ada@example.org", "s3cret-pass")
        with self.assertRaises(ProfileError):
            change_email(self.store, "ada@example.org", "not an address")


if __name__ == "__main__":
    unittest.main()

import inspect
import unittest

import accounts.profile
import accounts.signup
from accounts.profile import ProfileError, change_email
from accounts.signup import SignupError, sign_up
from accounts.store import AccountStore
from accounts.validation import is_valid_email


class ValidationTest(unittest.TestCase):
    def test_valid(self):
        for address in ("a@b.co", "first.last+tag@mail.example.org", "x_y%z@host-name.io"):
            self.assertTrue(is_valid_email(address), address)

    def test_invalid(self):
        for address in ("", "a@b", "@b.co", "a@b.c", "a b@c.org", "a@@b.org", "a@b..org"):
            self.assertFalse(is_valid_email(address), address)

    def test_returns_bool(self):
        self.assertIs(is_valid_email("a@b.co"), True)

    def test_pattern_exists_once(self):
        for module in (accounts.signup, accounts.profile):
            source = inspect.getsource(module)
            self.assertNotIn("a-z]{2,}", source, module.__name__)
            self.assertIn("is_valid_email", source, module.__name__)

    def test_behaviour_kept(self):
        store = AccountStore()
        with self.assertRaises(SignupError):
            sign_up(store, "a@b", "long-enough")
        sign_up(store, "A@B.CO", "long-enough")
        with self.assertRaises(ProfileError):
            change_email(store, "a@b.co", "a@b")
        self.assertEqual(change_email(store, "a@b.co", " C@D.ORG ")["email"], "c@d.org")


if __name__ == "__main__":
    unittest.main()

import unittest

from trellis_plugin import Allow, Deny, InvalidConfig
from trellis_plugin.testing import Harness, evaluation_request

from my_policy import MyPolicy


class MyPolicyTest(unittest.TestCase):
    def test_denies_and_caps(self):
        h = Harness(MyPolicy(), {"deniedSuffix": ".internal", "maxDays": 30})
        self.assertIsInstance(h.evaluate(evaluation_request(dns=["db.internal"])), Deny)
        self.assertEqual(h.evaluate(evaluation_request(dns=["www.example.com"], validity_days=90)), Allow(30))

    def test_schema(self):
        with self.assertRaises(InvalidConfig):
            Harness(MyPolicy()).validate({"maxDays": "thirty"})


if __name__ == "__main__":
    unittest.main()

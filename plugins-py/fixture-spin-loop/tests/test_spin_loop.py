import unittest

from trellis_plugin import Allow, InvalidConfig
from trellis_plugin.testing import Harness, evaluation_request

from spin_loop import SpinLoop


class SpinLoopTest(unittest.TestCase):
    # The spinning path never returns, so natively only the other one is run.
    def test_allows_when_not_spinning(self):
        self.assertEqual(Harness(SpinLoop(), {"spin": False}).evaluate(evaluation_request(dns=["a.example.com"])), Allow())

    def test_schema(self):
        with self.assertRaises(InvalidConfig):
            Harness(SpinLoop()).validate({"spin": "yes"})


if __name__ == "__main__":
    unittest.main()

"""Native tests through the SDK's harness: `python -m unittest discover -s tests` (with sdk-python on
PYTHONPATH, as scripts/build-plugins.sh runs them)."""

import unittest

from trellis_plugin import Allow, Deny, InvalidConfig
from trellis_plugin.testing import Harness, evaluation_request

from domain_policy import DomainPolicy


class DomainPolicyTest(unittest.TestCase):
    def test_suffixes_and_wildcards(self):
        h = Harness(DomainPolicy(), {"allowedDnsSuffixes": [".example.com"], "allowWildcards": False})
        self.assertEqual(h.evaluate(evaluation_request("www.example.com")), Allow())
        denied = h.evaluate(evaluation_request("www.example.org", dns=["*.example.com", "badexample.com"]))
        self.assertIsInstance(denied, Deny)
        self.assertEqual([r.code for r in denied.reasons],
                         ["wildcard_not_allowed", "dns_suffix_not_allowed", "dns_suffix_not_allowed"])
        self.assertEqual(denied.reasons[1].message,
                         "DNS name badexample.com is not under an allowed DNS suffix (.example.com)")

    def test_validity_is_capped(self):
        h = Harness(DomainPolicy(), {"maxValidityDays": 30})
        self.assertEqual(h.evaluate(evaluation_request("a.example.com", validity_days=200)), Allow(30))
        self.assertEqual(h.evaluate(evaluation_request("a.example.com", validity_days=7)), Allow())

    def test_bad_configurations_list_every_problem(self):
        h = Harness(DomainPolicy())
        with self.assertRaises(InvalidConfig) as caught:
            h.validate({"allowedDnsSuffixes": ["", "*.x.com"], "maxValidityDays": 0, "allowedIpRanges": []})
        fields = sorted(i.field for i in caught.exception.issues)
        self.assertEqual(fields, ["/allowedDnsSuffixes/0", "/allowedDnsSuffixes/1", "/allowedIpRanges",
                                  "/maxValidityDays"])


if __name__ == "__main__":
    unittest.main()

"""Native tests with the SDK's fake HTTP: `python -m unittest discover -s tests`."""

import unittest

from trellis_plugin import InvalidConfig, Response, Upstream
from trellis_plugin.testing import FakeHttp, Harness, event

from webhook_notifier import WebhookNotifier

URL = "https://hooks.example.net/trellis"


class WebhookNotifierTest(unittest.TestCase):
    def test_posts_the_event_with_the_token(self):
        http = FakeHttp().on("POST", URL, Response(202, [("content-type", "application/json")], b'{"id":"msg-7"}'))
        h = Harness(WebhookNotifier(), {"url": URL, "token": "s3cret"}, http)
        delivery = h.notify(event(data={"commonName": "www.example.com"}))
        self.assertEqual((delivery.status, delivery.reference), (202, "msg-7"))
        sent = http.requests[0]
        self.assertIn(("authorization", "Bearer s3cret"), sent.headers)
        self.assertIn(("idempotency-key", "evt-1"), sent.headers)
        self.assertEqual(sent.json()["data"], {"commonName": "www.example.com"})
        self.assertEqual(h.host.logs[0][1], "event delivered")

    def test_server_errors_are_retryable(self):
        http = FakeHttp().on("POST", URL, Response(503))
        with self.assertRaises(Upstream) as caught:
            Harness(WebhookNotifier(), {"url": URL}, http).notify(event())
        self.assertTrue(caught.exception.retryable)

    def test_config_problems(self):
        with self.assertRaises(InvalidConfig) as caught:
            Harness(WebhookNotifier()).validate({"url": "http://x", "colour": 1})
        self.assertEqual(sorted(i.field for i in caught.exception.issues), ["/colour", "/url"])


if __name__ == "__main__":
    unittest.main()

"""The plugin's logic, natively: `python3 -m unittest discover plugins/webhook-notify/tests`.

What needs the host (`app.py`, `outbound.py`: the generated `wit_world`) is proven end to end
by `host/tests/webhook_notify.rs`.
"""

import base64
import enum
import hashlib
import hmac
import json
import os
import sys
import unittest
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import answer  # noqa: E402
import cloudevent  # noqa: E402
from settings import ConfigError, Settings  # noqa: E402

Phase = enum.Enum(
    "Phase",
    "PENDING RUNNING RESTARTING SUSPENDED SUCCEEDED FAILED TERMINATING DELETED UNKNOWN",
)
FleetEventKind = enum.Enum(
    "FleetEventKind", "CLUSTER_OFFLINE CLUSTER_ONLINE RULE_FIRING RULE_RESOLVED"
)
URL = "https://hooks.example.com/hooks/t0ken-abcdef?key=q5ery-s3cret"
SECRET = "s3cret-signing-key"


def event(**changes):
    fields = dict(
        id="east/u-1/42",
        transition_key="east/u-1/failed@2026-11-21T10:00:00Z",
        cluster="east",
        api_version="batch/v1",
        kind="Job",
        namespace="ml",
        name="train",
        uid="u-1",
        resource_version="42",
        generation=1,
        phase=Phase.FAILED,
        raw_phase="Failed",
        reason="BackoffLimitExceeded",
        message='worker "0" said:\nOOM',
        previous_phase=Phase.RUNNING,
        transition_time="2026-11-21T10:00:00Z",
        labels=[("team", "nlp")],
        annotations=[],
        object_json='{"kind": "Job", "status": {}}',
        synthetic=False,
    )
    fields.update(changes)
    return SimpleNamespace(**fields)


def fleet_event(**changes):
    fields = dict(
        id="east/8f0c2d1e-5a7b-8c9d-8e0f-1a2b3c4d5e6f/1764324090000",
        kind=FleetEventKind.RULE_FIRING,
        cluster="east",
        rule="failure-ratio",
        value=0.31,
        threshold=0.15,
        since="2026-11-28T10:00:00Z",
        time="2026-11-28T10:02:00Z",
        summary="job failure ratio 0.31 > 0.15 for 2m on east",
    )
    fields.update(changes)
    return SimpleNamespace(**fields)


def settings(**config):
    config.setdefault("url", URL)
    return Settings(list(config.items()))


class ConfigTests(unittest.TestCase):
    def refused(self, key, **config):
        with self.assertRaises(ConfigError) as caught:
            settings(**config)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f"config `{key}`"), message)
        for secret in ("t0ken-abcdef", "q5ery-s3cret", SECRET, "whsec_"):
            if secret != "whsec_" or key != "secret":
                self.assertNotIn(secret, message)
        return message

    def test_defaults(self):
        s = settings()
        self.assertEqual(s.mode, "structured")
        self.assertEqual(len(s.phases), 11)
        self.assertIsNone(s.key)
        self.assertEqual(s.target.shown, "https://hooks.example.com")
        self.assertEqual(s.target.path_with_query, "/hooks/t0ken-abcdef?key=q5ery-s3cret")

    def test_every_key_is_checked(self):
        self.assertIn("unknown key", self.refused("secrets", secrets="x"))
        self.refused("url", url="")
        with self.assertRaises(ConfigError):
            Settings([])
        self.refused("url", url="ftp://hooks.example.com/hooks/t0ken-abcdef")
        self.refused("url", url="https://hooks.example.com/hooks/t0ken-abcdef x")
        self.refused("url", url="https://user:q5ery-s3cret@hooks.example.com/")
        self.refused("url", url="https://hooks.example.com:99999/hooks/t0ken-abcdef")
        self.refused("url", url="https:///hooks/t0ken-abcdef")
        self.refused("mode", mode="batch")
        self.refused("secret", secret="")
        self.refused("secret", secret="whsec_not base64!")
        self.assertIn("runing", self.refused("phases", phases="failed,runing"))
        self.refused("phases", phases=" , ")
        self.refused("include_object", include_object="yes")
        self.refused("content_type", content_type="text/plain")
        self.refused("content_type", template="x", content_type="plain")
        self.assertIn("${job}", self.refused("template", template='{"j": "${job}"}'))
        self.refused("template", template='{"j": "$ x"}')
        self.refused("template", template='{"phase": ${phase}}')
        self.refused("include_object", template='{"p": "${phase}"}', include_object="true")
        self.refused("source", source="/x/${zone}")
        self.refused("source", source=" ")

    def test_secrets_are_keys(self):
        self.assertEqual(settings(secret=SECRET).key, SECRET.encode())
        raw = b"\x01\x02binary key"
        whsec = "whsec_" + base64.b64encode(raw).decode()
        self.assertEqual(settings(secret=whsec).key, raw)

    def test_a_text_template_need_not_be_json(self):
        s = settings(template="${name} is ${phase}", content_type="text/plain")
        self.assertFalse(s.json_data)
        self.assertTrue(settings(template='{"a": "${name}"}',
                                 content_type="application/vnd.x+json").json_data)


class EncodeTests(unittest.TestCase):
    def test_structured(self):
        headers, body = cloudevent.encode(event(), settings())
        self.assertEqual(headers, [("content-type", "application/cloudevents+json")])
        doc = json.loads(body)
        self.assertEqual(doc["specversion"], "1.0")
        self.assertEqual(doc["id"], "east/u-1/42")
        self.assertEqual(doc["source"], "/jobrelay/east")
        self.assertEqual(doc["type"], "io.jobrelay.job.failed")
        self.assertEqual(doc["subject"], "ml/train")
        self.assertEqual(doc["time"], "2026-11-21T10:00:00Z")
        self.assertEqual(doc["datacontenttype"], "application/json")
        self.assertEqual(doc["transitionkey"], "east/u-1/failed@2026-11-21T10:00:00Z")
        data = doc["data"]
        self.assertEqual(data["previous_phase"], "running")
        self.assertEqual(data["labels"], {"team": "nlp"})
        self.assertNotIn("object", data)
        self.assertNotIn("object_json", data)
        with_object = json.loads(cloudevent.encode(event(), settings(include_object="true"))[1])
        self.assertEqual(with_object["data"]["object"], {"kind": "Job", "status": {}})

    def test_binary_with_a_json_template(self):
        s = settings(
            mode="binary",
            template='{"text": "${kind} ${namespace}/${name}: ${phase}", "why": "${message}"}',
            source="urn:jobrelay:${cluster}:${namespace}",
        )
        headers, body = cloudevent.encode(event(), s)
        named = dict(headers)
        self.assertEqual(named["content-type"], "application/json")
        self.assertEqual(named["ce-specversion"], "1.0")
        self.assertEqual(named["ce-type"], "io.jobrelay.job.failed")
        self.assertEqual(named["ce-source"], "urn:jobrelay:east:ml")
        self.assertEqual(named["ce-subject"], "ml/train")
        self.assertEqual(named["ce-transitionkey"], "east/u-1/failed@2026-11-21T10:00:00Z")
        self.assertNotIn("ce-datacontenttype", named)
        data = json.loads(body)
        self.assertEqual(data, {"text": "Job ml/train: failed", "why": 'worker "0" said:\nOOM'})

    def test_header_values_are_percent_encoded(self):
        self.assertEqual(cloudevent.header_value('a b"%é\n'), "a%20b%22%25%C3%A9%0A")

    def test_text_template_in_structured_mode_is_a_string(self):
        s = settings(template="${name} ${phase} $$5", content_type="text/plain")
        doc = json.loads(cloudevent.encode(event(), s)[1])
        self.assertEqual(doc["data"], "train failed $5")
        self.assertEqual(doc["datacontenttype"], "text/plain")

    def test_signature_matches_the_standard_webhooks_vector(self):
        # From the Standard Webhooks specification's reference tests.
        key = settings(secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").key
        signed = cloudevent.signature(
            key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
        )
        self.assertEqual(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        headers = cloudevent.sign([], b"k", "id-1", 5, b"body")
        expected = base64.b64encode(hmac.new(b"k", b"id-1.5.body", hashlib.sha256).digest())
        self.assertEqual(
            headers,
            [("webhook-id", "id-1"), ("webhook-timestamp", "5"),
             ("webhook-signature", "v1," + expected.decode())],
        )


class FleetTests(unittest.TestCase):
    def test_structured_whatever_the_job_settings(self):
        # `phases` and `template` are about jobs: a fleet event is posted whole all the same.
        s = settings(phases="failed", template='{"text": "${name}"}')
        headers, body = cloudevent.encode_fleet(fleet_event(), s)
        self.assertEqual(headers, [("content-type", "application/cloudevents+json")])
        document = json.loads(body)
        self.assertEqual(
            document,
            {
                "specversion": "1.0",
                "id": "east/8f0c2d1e-5a7b-8c9d-8e0f-1a2b3c4d5e6f/1764324090000",
                "source": "/jobrelay/east",
                "type": "io.jobrelay.fleet.rule-firing",
                "subject": "east/failure-ratio",
                "time": "2026-11-28T10:00:00Z",
                "datacontenttype": "application/json",
                "data": {
                    "id": "east/8f0c2d1e-5a7b-8c9d-8e0f-1a2b3c4d5e6f/1764324090000",
                    "kind": "rule-firing",
                    "cluster": "east",
                    "rule": "failure-ratio",
                    "value": 0.31,
                    "threshold": 0.15,
                    "since": "2026-11-28T10:00:00Z",
                    "time": "2026-11-28T10:02:00Z",
                    "summary": "job failure ratio 0.31 > 0.15 for 2m on east",
                },
            },
        )

    def test_binary_cluster_event(self):
        s = settings(mode="binary", source="/fleet/${cluster}/${namespace}")
        event = fleet_event(
            kind=FleetEventKind.CLUSTER_OFFLINE, rule=None, value=None, threshold=None
        )
        headers, body = cloudevent.encode_fleet(event, s)
        self.assertEqual(
            dict(headers),
            {
                "content-type": "application/json",
                "ce-specversion": "1.0",
                "ce-id": event.id,
                "ce-source": "/fleet/east/",
                "ce-type": "io.jobrelay.fleet.cluster-offline",
                "ce-subject": "east",
                "ce-time": "2026-11-28T10:00:00Z",
            },
        )
        data = json.loads(body)
        self.assertEqual(data["kind"], "cluster-offline")
        self.assertIsNone(data["rule"])

    def test_every_kind_has_its_type(self):
        types = [
            cloudevent.FLEET_TYPE_PREFIX + cloudevent.fleet_kind_name(kind)
            for kind in FleetEventKind
        ]
        self.assertEqual(
            types,
            [
                "io.jobrelay.fleet.cluster-offline",
                "io.jobrelay.fleet.cluster-online",
                "io.jobrelay.fleet.rule-firing",
                "io.jobrelay.fleet.rule-resolved",
            ],
        )


class AnswerTests(unittest.TestCase):
    def setUp(self):
        self.target = settings().target

    def outcome(self, status, body=b""):
        return answer.by_status(status, body, self.target, SECRET)

    def test_retry_after(self):
        self.assertEqual(answer.retry_after("30"), 30)
        self.assertEqual(answer.retry_after(" 0 "), 1)
        self.assertEqual(answer.retry_after("86400"), 3600)
        self.assertIsNone(answer.retry_after("Wed, 21 Oct 2026 07:28:00 GMT"))
        self.assertIsNone(answer.retry_after(None))

    def test_statuses(self):
        for status in (200, 201, 202, 204):
            self.assertEqual(self.outcome(status)[0], answer.DELIVERED)
        outcome, message = self.outcome(429)
        self.assertEqual(outcome, answer.THROTTLED)
        self.assertIn("HTTP 429", message)
        for status in (408, 425, 500, 502, 503, 599):
            outcome, message = self.outcome(status)
            self.assertEqual(outcome, answer.RETRY, status)
            self.assertIn(f"HTTP {status}", message)
        for status in (301, 400, 401, 403, 404, 409, 413, 422):
            outcome, message = self.outcome(status)
            self.assertEqual(outcome, answer.GIVE_UP, status)
            self.assertIn(f"HTTP {status}", message)
        self.assertIn("secret", self.outcome(401, b"bad signature")[1])

    def test_messages_keep_nothing_secret(self):
        said = f"bad signature for {URL} with {SECRET}\nand more".encode()
        _, message = self.outcome(401, said)
        self.assertIn("https://hooks.example.com", message)
        self.assertIn("bad signature", message)
        for hidden in ("t0ken-abcdef", "q5ery-s3cret", SECRET, "\n"):
            self.assertNotIn(hidden, message)
        self.assertLess(len(self.outcome(500, b"x" * 5000)[1]), 400)

    def test_no_answer(self):
        class ErrorCode_HttpRequestDenied:
            pass

        class ErrorCode_DestinationIpProhibited:
            pass

        class ErrorCode_ConnectionRefused:
            pass

        class ErrorCode_DnsError:
            value = "rcode=servfail"

        outcome, message = answer.no_answer(ErrorCode_HttpRequestDenied(), self.target, SECRET)
        self.assertEqual(outcome, answer.GIVE_UP)
        self.assertIn("grants.http", message)
        self.assertIn('"https://hooks.example.com"', message)
        outcome, message = answer.no_answer(
            ErrorCode_DestinationIpProhibited(), self.target, SECRET
        )
        self.assertEqual(outcome, answer.GIVE_UP)
        self.assertIn("allow_private", message)
        outcome, message = answer.no_answer(ErrorCode_ConnectionRefused(), self.target, SECRET)
        self.assertEqual((outcome, message),
                         (answer.RETRY, "no answer from https://hooks.example.com: connection-refused"))
        self.assertIn("dns-error (rcode=servfail)",
                      answer.no_answer(ErrorCode_DnsError(), self.target, SECRET)[1])


if __name__ == "__main__":
    unittest.main()

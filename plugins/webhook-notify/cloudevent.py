"""A job event or a fleet event as a CloudEvent (CloudEvents 1.0, HTTP protocol binding), and
its signature.

Plain Python (no `wit_world`): the event is any object with the fields of the WIT `job-event`
or `fleet-event` (its phases and kinds are enum members named like the WIT's, e.g.
`Phase.FAILED`, `FleetEventKind.CLUSTER_OFFLINE`), so the unit tests run natively.

- Attributes: `specversion` 1.0; `id` the event's id (`cluster/uid/resource-version`: one per
  job version, the same on every retry and after a host restart); `source` the `source`
  template rendered (default `/jobrelay/<cluster>`); `type` `io.jobrelay.job.<phase>`;
  `subject` `<namespace>/<name>`; `time` the transition time; `datacontenttype`; and the
  extension `transitionkey`, the event's `transition_key` (the same for a transition seen live
  and one rebuilt after a watch gap).
- A fleet event (`encode_fleet`): `id` its id; `source` the template rendered with `cluster` and
  `id` (the job placeholders empty); `type` `io.jobrelay.fleet.<kind>` (`cluster-offline`,
  `cluster-online`, `rule-firing`, `rule-resolved`); `subject` `<cluster>`, or
  `<cluster>/<rule>` for a rule's; `time` its `since`; `datacontenttype` `application/json`; no
  `transitionkey`. Its data is the fleet event as JSON (`template` and `include_object`, made
  for jobs, do not apply).
- Structured mode: one JSON document (`application/cloudevents+json`) of the attributes and
  `data`. Binary mode: the attributes as `ce-*` headers, the data as the body with
  `content-type` = `datacontenttype`.
- Signed (Standard Webhooks): `webhook-id` (the CloudEvent id), `webhook-timestamp` (unix
  seconds) and `webhook-signature` `v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`.
"""

import base64
import hashlib
import hmac
import json

from settings import FIELDS

SPECVERSION = "1.0"
TYPE_PREFIX = "io.jobrelay.job."
FLEET_TYPE_PREFIX = "io.jobrelay.fleet."
FLEET_CONTENT_TYPE = "application/json"
STRUCTURED = "application/cloudevents+json"


def phase_name(phase):
    """`Phase.FAILED` -> `failed` (the WIT name); `None` stays `None`."""
    return None if phase is None else phase.name.lower()


def template_values(event, json_escaped):
    """The values `${field}` stands for; JSON-escaped (without quotes) for a JSON template."""
    values = {
        "cluster": event.cluster,
        "namespace": event.namespace,
        "name": event.name,
        "kind": event.kind,
        "uid": event.uid,
        "phase": phase_name(event.phase),
        "raw_phase": event.raw_phase,
        "reason": event.reason or "",
        "message": event.message or "",
        "transition_time": event.transition_time,
        "transition_key": event.transition_key,
        "id": event.id,
    }
    if json_escaped:
        values = {k: json.dumps(v, ensure_ascii=False)[1:-1] for k, v in values.items()}
    return values


def event_data(event, include_object):
    """The event as JSON data: every field of the WIT `job-event` but `object_json`, which comes
    as `object` (parsed) only when asked for."""
    data = {
        "id": event.id,
        "transition_key": event.transition_key,
        "cluster": event.cluster,
        "api_version": event.api_version,
        "kind": event.kind,
        "namespace": event.namespace,
        "name": event.name,
        "uid": event.uid,
        "resource_version": event.resource_version,
        "generation": event.generation,
        "phase": phase_name(event.phase),
        "raw_phase": event.raw_phase,
        "reason": event.reason,
        "message": event.message,
        "previous_phase": phase_name(event.previous_phase),
        "transition_time": event.transition_time,
        "labels": dict(event.labels),
        "annotations": dict(event.annotations),
        "synthetic": event.synthetic,
    }
    if include_object:
        try:
            data["object"] = json.loads(event.object_json) if event.object_json else None
        except ValueError:
            # Kept as text rather than lost: the cluster sent it this way.
            data["object"] = event.object_json
    return data


def attributes(event, settings):
    """The CloudEvent's context attributes, in the spec's order, then the extension."""
    return {
        "specversion": SPECVERSION,
        "id": event.id,
        "source": settings.source.substitute(template_values(event, False)),
        "type": TYPE_PREFIX + phase_name(event.phase),
        "subject": f"{event.namespace}/{event.name}",
        "time": event.transition_time,
        "datacontenttype": settings.content_type,
        "transitionkey": event.transition_key,
    }


def fleet_kind_name(kind):
    """`FleetEventKind.CLUSTER_OFFLINE` -> `cluster-offline` (the WIT name)."""
    return kind.name.lower().replace("_", "-")


def fleet_data(event):
    """The fleet event as JSON data: every field of the WIT `fleet-event`, the kind by name."""
    return {
        "id": event.id,
        "kind": fleet_kind_name(event.kind),
        "cluster": event.cluster,
        "rule": event.rule,
        "value": event.value,
        "threshold": event.threshold,
        "since": event.since,
        "time": event.time,
        "summary": event.summary,
    }


def fleet_attributes(event, settings):
    """A fleet event's context attributes, in the spec's order."""
    values = {field: "" for field in FIELDS}
    values.update(cluster=event.cluster, id=event.id)
    subject = event.cluster if event.rule is None else f"{event.cluster}/{event.rule}"
    return {
        "specversion": SPECVERSION,
        "id": event.id,
        "source": settings.source.substitute(values),
        "type": FLEET_TYPE_PREFIX + fleet_kind_name(event.kind),
        "subject": subject,
        "time": event.since,
        "datacontenttype": FLEET_CONTENT_TYPE,
    }


def header_value(text):
    """An attribute as an HTTP header value (HTTP binding 3.1.3.2): space, `"`, `%` and
    anything outside printable ASCII percent-encoded, from UTF-8."""
    out = []
    for byte in text.encode("utf-8"):
        if 0x21 <= byte <= 0x7E and byte not in (0x22, 0x25):
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def encode(event, settings):
    """The request for `event`: `(headers, body)`, headers as `(name, value)` pairs, unsigned."""
    attrs = attributes(event, settings)
    if settings.template is not None:
        text = settings.template.substitute(template_values(event, settings.json_data))
        data_bytes = text.encode("utf-8")
        if settings.json_data:
            # Checked at `init` with sample values; escaped values keep it JSON.
            data = json.loads(text)
        else:
            data = text
    else:
        data = event_data(event, settings.include_object)
        data_bytes = json.dumps(data, ensure_ascii=False).encode("utf-8")
    if settings.mode == "binary":
        headers = [("content-type", attrs.pop("datacontenttype"))]
        headers += [(f"ce-{name}", header_value(value)) for name, value in attrs.items()]
        return headers, data_bytes
    document = dict(attrs)
    document["data"] = data
    body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    return [("content-type", STRUCTURED)], body


def encode_fleet(event, settings):
    """The request for the fleet event `event`: `(headers, body)`, unsigned."""
    return _request(fleet_attributes(event, settings), fleet_data(event), settings.mode)


def _request(attrs, data, mode):
    """JSON `data` with the attributes `attrs`, in `mode`."""
    data_bytes = json.dumps(data, ensure_ascii=False).encode("utf-8")
    if mode == "binary":
        headers = [("content-type", attrs.pop("datacontenttype"))]
        headers += [(f"ce-{name}", header_value(value)) for name, value in attrs.items()]
        return headers, data_bytes
    document = dict(attrs)
    document["data"] = data
    body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    return [("content-type", STRUCTURED)], body


def signature(key, message_id, timestamp, body):
    """Standard Webhooks: `v1,` and base64 of HMAC-SHA256 over `id.timestamp.body`."""
    signed = f"{message_id}.{timestamp}.".encode("utf-8") + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def sign(headers, key, message_id, timestamp, body):
    """`headers` with the three Standard Webhooks headers added."""
    return headers + [
        ("webhook-id", message_id),
        ("webhook-timestamp", str(timestamp)),
        ("webhook-signature", signature(key, message_id, timestamp, body)),
    ]

"""What the receiver's answer (or the lack of one) means for the event.

The split follows one question: could the same request succeed later? A throttled receiver
(429) asks for a wait, which is no failure: the event is deferred through the host's
`deferral` for its `Retry-After` (else `THROTTLE_SECONDS`), spending no retry attempt. A
failing receiver (408, 425, 5xx) and a request that got no answer (refused or cut connection,
DNS, TLS, a timeout of the grant) can succeed later too, so the host retries the event with
backoff, keeping the job's order. A refusal (any other status: a bad signature, a wrong path, a body the
receiver does not take) or a destination the host will not connect to cannot, so the event is
given up — dead-lettered at once, replayable once the cause is fixed.

Plain Python (no `wit_world`). Messages show the destination as `scheme://host[:port]` only,
and what a receiver or the host said is scrubbed of the URL's path and query values and of the
secret before it is shown.
"""

import re

DELIVERED = "delivered"
THROTTLED = "throttled"
RETRY = "retry"
GIVE_UP = "give-up"

RETRIED_STATUSES = (408, 425)
# How long a throttled event waits when the answer has no `Retry-After`.
THROTTLE_SECONDS = 5


def retry_after(value):
    """The seconds a `Retry-After` value asks for (its delay-seconds form; an HTTP date is not
    read), at least 1 and at most an hour; `None` without a usable value."""
    try:
        seconds = int(value.strip())
    except (AttributeError, ValueError):
        return None
    return min(max(seconds, 1), 3600)
# How much of a refusal's body a message quotes.
QUOTED = 200


def scrub(text, target, secret):
    """`text` with the URL's hidden parts and the secret replaced by `***`."""
    for value in [secret or "", *target.hidden]:
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


def quote(body, target, secret):
    """A refusal's body, on one line, cut, scrubbed; empty when there is none."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    text = " ".join(text.split())
    if len(text) > QUOTED:
        text = text[:QUOTED] + "…"
    return scrub(text, target, secret)


def by_status(status, body, target, secret):
    """`(outcome, message)` for an HTTP answer."""
    if 200 <= status <= 299:
        return DELIVERED, f"{target.shown} answered HTTP {status}"
    said = quote(body, target, secret)
    said = f": {said}" if said else ""
    if status == 429:
        return THROTTLED, f"{target.shown} answered HTTP {status}{said}"
    if status in RETRIED_STATUSES or 500 <= status <= 599:
        return RETRY, f"{target.shown} answered HTTP {status}{said}"
    hint = ""
    if status in (401, 403):
        hint = " (does `secret` match the receiver's?)"
    elif status in (404, 405, 410):
        hint = " (is `url` the receiver's endpoint?)"
    elif 300 <= status <= 399:
        hint = " (redirects are not followed: set `url` to where it points)"
    return GIVE_UP, f"{target.shown} refused the event: HTTP {status}{said}{hint}"


def error_name(code):
    """A `wasi:http` error code's name: `ErrorCode_ConnectionRefused()` -> `connection-refused`,
    with its payload, if any."""
    name = type(code).__name__
    name = name.split("_", 1)[1] if "_" in name else name
    words = re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
    value = getattr(code, "value", None)
    return f"{words} ({value})" if value is not None else words


def no_answer(code, target, secret, detail=None):
    """`(outcome, message)` for a request that got no HTTP answer. `code` is the `wasi:http`
    error code (or a reason string when there is none); `detail`, if given, what else went
    wrong (the body could not be written whole)."""
    name = type(code).__name__
    if name.endswith("HttpRequestDenied"):
        return GIVE_UP, (
            f"the host refused the request to {target.shown}: list it in the manifest's "
            f'grants.http.allow (grants: {{http: {{allow: ["{target.shown}"]}}}})'
        )
    if name.endswith("DestinationIpProhibited"):
        return GIVE_UP, (
            f"the host refused the request to {target.shown}: it resolves to a private "
            "address; if you trust it, set grants.http.allow_private: true"
        )
    if name.endswith("HttpRequestUriInvalid"):
        return GIVE_UP, f"the host refused the request to {target.shown}: `url` is not valid"
    reason = code if isinstance(code, str) else error_name(code)
    if detail is not None:
        reason = f"{reason} ({detail})"
    return RETRY, f"no answer from {target.shown}: {scrub(reason, target, secret)}"

"""One POST through `wasi:http`, the way every jobrelay plugin makes outbound requests.

The host lets a request through only to a destination the manifest's `grants.http.allow`
names (and, for a private address, `allow_private`); a refused one comes back as an error code,
like a request that got no answer.
"""

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as http

# The body is written in pieces no larger than this: a WASI output stream takes at most 4096
# bytes per blocking write.
CHUNK = 4096
# How much of an answer's body is read: enough to quote a refusal.
READ_AT_MOST = 64 * 1024


class NoAnswer(Exception):
    """No HTTP answer came; `code` is the `wasi:http` error code, or a reason string."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class BadHeader(Exception):
    """The host's HTTP layer refused a header (`name`)."""

    def __init__(self, name):
        super().__init__(name)
        self.name = name


def post(target, headers, body):
    """POSTs `body` (bytes) with `headers` (name, value) pairs to `target` (a
    `settings.Target`). Returns the answer's status, its `Retry-After` value (or `None`) and
    (the start of) its body."""
    pairs = [(name, value.encode("utf-8")) for name, value in headers]
    try:
        fields = http.Fields.from_list(pairs)
    except Err:
        for pair in pairs:
            try:
                with http.Fields.from_list([pair]):
                    pass
            except Err:
                raise BadHeader(pair[0]) from None
        raise BadHeader("?") from None
    request = http.OutgoingRequest(fields)
    request.set_method(http.Method_Post())
    request.set_scheme(http.Scheme_Https() if target.scheme == "https" else http.Scheme_Http())
    request.set_authority(target.authority)
    request.set_path_with_query(target.path_with_query)
    outgoing = request.body()
    with outgoing.write() as stream:
        for start in range(0, len(body), CHUNK):
            stream.blocking_write_and_flush(body[start:start + CHUNK])
    try:
        future = outgoing_handler.handle(request, None)
    except Err as error:
        raise NoAnswer(error.value) from None
    http.OutgoingBody.finish(outgoing, None)
    with future:
        answer = future.get()
        while answer is None:
            with future.subscribe() as ready:
                ready.block()
            answer = future.get()
    # `get` gives Ok(Ok(response)), Ok(Err(error code)), or Err once taken.
    if not isinstance(answer, Ok):
        raise NoAnswer("the response was taken twice")
    if not isinstance(answer.value, Ok):
        raise NoAnswer(answer.value.value)
    response = answer.value.value
    status = response.status()
    with response.headers() as fields:
        values = fields.get("retry-after")
    wait = values[0].decode("utf-8", "replace") if values else None
    received = b""
    with response.consume() as incoming:
        with incoming.stream() as reader:
            while len(received) < READ_AT_MOST:
                try:
                    received += reader.blocking_read(READ_AT_MOST - len(received))
                except Err:
                    break  # the end of the body (or a broken stream): what came is kept
    return status, wait, received

"""POST a body through wasi:http, the way every jobrelay plugin makes outbound requests.

The host lets a request through only to a destination the manifest's `grants.http.allow`
names (and, for a private address, `allow_private`); a refused one comes back as an error.

The order matters: the request goes to `outgoing_handler.handle` first, and only then is its
body written. The host streams a body into the connection as it is written and holds little of
it meanwhile, so a body written before `handle` stops there and the call waits until its time
limit. The body is written in the pieces `check_write` allows (`blocking_write_and_flush` would
take at most 4,096 bytes a call), flushed and finished, with its `content-length` declared so
every server reads it the same way.
"""

from collections import namedtuple
from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as http


class Response(namedtuple("Response", "status headers body")):
    """An answer: the status, the headers (`(name, value)` pairs, names lower-cased, values as
    text) and the body. `status, headers, body = webhook.post(...)` unpacks it."""

    def header(self, name):
        """The first value of header `name` (any case), or `None`: `header("retry-after")`."""
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)


def _write(outgoing, body):
    """Writes `body` in the pieces the stream takes, flushes and finishes it; `None`, or why it
    could not be written whole (the body is then left unfinished: the request is incomplete)."""
    try:
        with outgoing.write() as stream:
            view = memoryview(body)
            while view:
                permitted = stream.check_write()
                if permitted == 0:
                    with stream.subscribe() as ready:
                        ready.block()
                    continue
                stream.write(bytes(view[:permitted]))
                view = view[permitted:]
            stream.blocking_flush()
        http.OutgoingBody.finish(outgoing, None)
    except Err as error:
        return f"writing the body: {error.value}"
    return None


def post(url, body, headers=()):
    """POSTs `body` (bytes) to `url` with `headers` (name, value) pairs. Returns a `Response`;
    raises `Err` with a readable reason when no answer came."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Err(f"`{url}` is not an http:// or https:// URL")
    pairs = [(name, value.encode()) for name, value in headers if name.lower() != "content-length"]
    pairs.append(("content-length", str(len(body)).encode()))
    request = http.OutgoingRequest(http.Fields.from_list(pairs))
    request.set_method(http.Method_Post())
    request.set_scheme(http.Scheme_Https() if parts.scheme == "https" else http.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    # Taken before `handle`, which consumes the request; written after it.
    outgoing = request.body()
    try:
        future = outgoing_handler.handle(request, None)
    except Err as error:
        raise Err(f"POST {parts.netloc}: {error.value}")
    unwritten = _write(outgoing, body)
    with future:
        answer = future.get()
        while answer is None:
            with future.subscribe() as ready:
                ready.block()
            answer = future.get()
    # `get` gives Ok(Ok(response)), Ok(Err(error code)), or Err once taken. An answer counts
    # even when the body could not be written whole (an early 413 says more).
    if not isinstance(answer, Ok) or not isinstance(answer.value, Ok):
        reason = answer.value.value if isinstance(answer, Ok) else "no answer"
        if unwritten is not None:
            reason = f"{reason} ({unwritten})"
        raise Err(f"POST {parts.netloc}: {reason}")
    response = answer.value.value
    status = response.status()
    with response.headers() as fields:
        pairs = [(name.lower(), value.decode("utf-8", "replace")) for name, value in fields.entries()]
    received = b""
    with response.consume() as incoming:
        with incoming.stream() as reader:
            while True:
                try:
                    received += reader.blocking_read(65536)
                except Err:
                    break  # the end of the body (or a broken stream): what came is kept
    return Response(status, pairs, received)

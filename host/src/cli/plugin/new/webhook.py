"""POST a body through wasi:http, the way every jobrelay plugin makes outbound requests.

The host lets a request through only to a destination the manifest's `grants.http.allow`
names (and, for a private address, `allow_private`); a refused one comes back as an error.
"""

from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as http

# The body is written in pieces no larger than this: a WASI output stream takes at most
# 4096 bytes per blocking write.
CHUNK = 4096


def post(url, body, headers=()):
    """POSTs `body` (bytes) to `url` with `headers` (name, value) pairs. Returns the answer's
    status and body; raises `Err` with a readable reason when no answer came."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Err(f"`{url}` is not an http:// or https:// URL")
    fields = http.Fields.from_list([(name, value.encode()) for name, value in headers])
    request = http.OutgoingRequest(fields)
    request.set_method(http.Method_Post())
    request.set_scheme(http.Scheme_Https() if parts.scheme == "https" else http.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing = request.body()
    with outgoing.write() as stream:
        for start in range(0, len(body), CHUNK):
            stream.blocking_write_and_flush(body[start:start + CHUNK])
    try:
        future = outgoing_handler.handle(request, None)
    except Err as error:
        raise Err(f"POST {parts.netloc}: {error.value}")
    http.OutgoingBody.finish(outgoing, None)
    with future:
        answer = future.get()
        while answer is None:
            with future.subscribe() as ready:
                ready.block()
            answer = future.get()
    # `get` gives Ok(Ok(response)), Ok(Err(error code)), or Err once taken.
    if not isinstance(answer, Ok) or not isinstance(answer.value, Ok):
        reason = answer.value.value if isinstance(answer, Ok) else "no answer"
        raise Err(f"POST {parts.netloc}: {reason}")
    response = answer.value.value
    status = response.status()
    received = b""
    with response.consume() as incoming:
        with incoming.stream() as reader:
            while True:
                try:
                    received += reader.blocking_read(65536)
                except Err:
                    break  # the end of the body (or a broken stream): what came is kept
    return status, received

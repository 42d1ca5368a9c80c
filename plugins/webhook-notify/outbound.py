"""One POST through `wasi:http`, the way every jobrelay plugin makes outbound requests.

The host lets a request through only to a destination the manifest's `grants.http.allow`
names (and, for a private address, `allow_private`); a refused one comes back as an error code,
like a request that got no answer.

The order matters: the request goes to `outgoing_handler.handle` first, and only then is its
body written. The host streams a body into the connection as it is written and holds little of
it meanwhile (one piece), so a body written before `handle` stops there, and the call waits
until its time limit. The body is written in the pieces `check_write` allows (the host says how
much it takes now; `blocking_write_and_flush` would take at most 4,096 bytes a call), flushed
and finished, with its `content-length` declared so every server reads it the same way.
"""

from collections import namedtuple

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as http

# How much of an answer's body is read: enough to quote a refusal.
READ_AT_MOST = 64 * 1024


class Answer(namedtuple("Answer", "status headers body")):
    """An HTTP answer: the status, the headers (`(name, value)` pairs, names lower-cased,
    values as text) and (the start of) the body."""

    def header(self, name):
        """The first value of header `name` (any case), or `None`."""
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)


class NoAnswer(Exception):
    """No HTTP answer came; `code` is the `wasi:http` error code, or a reason string;
    `detail`, if not `None`, why the body could not be written whole."""

    def __init__(self, code, detail=None):
        super().__init__(code)
        self.code = code
        self.detail = detail


class BadHeader(Exception):
    """The host's HTTP layer refused a header (`name`)."""

    def __init__(self, name):
        super().__init__(name)
        self.name = name


def fields(headers):
    """The request's headers as `wasi:http` fields; `BadHeader` names one the host refuses."""
    pairs = [(name, value.encode("utf-8")) for name, value in headers]
    try:
        return http.Fields.from_list(pairs)
    except Err:
        for pair in pairs:
            try:
                with http.Fields.from_list([pair]):
                    pass
            except Err:
                raise BadHeader(pair[0]) from None
        raise BadHeader("?") from None


def write_body(outgoing, body):
    """Writes `body` into the request's body in the pieces the stream takes, flushes and
    finishes it. Returns `None`, or why the body could not be written whole (then it is left
    unfinished, which tells the host the request is incomplete)."""
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


def post(target, headers, body):
    """POSTs `body` (bytes) with `headers` (name, value) pairs to `target` (a
    `settings.Target`). Returns the `Answer`."""
    headers = [(n, v) for n, v in headers if n.lower() != "content-length"]
    headers.append(("content-length", str(len(body))))
    request = http.OutgoingRequest(fields(headers))
    request.set_method(http.Method_Post())
    request.set_scheme(http.Scheme_Https() if target.scheme == "https" else http.Scheme_Http())
    request.set_authority(target.authority)
    request.set_path_with_query(target.path_with_query)
    # Taken before `handle`, which consumes the request; written after it.
    outgoing = request.body()
    try:
        future = outgoing_handler.handle(request, None)
    except Err as error:
        raise NoAnswer(error.value) from None
    unwritten = write_body(outgoing, body)
    with future:
        answer = future.get()
        while answer is None:
            with future.subscribe() as ready:
                ready.block()
            answer = future.get()
    # `get` gives Ok(Ok(response)), Ok(Err(error code)), or Err once taken. A server that
    # answered although the body could not be written whole (an early 413) says more than the
    # write error; without an answer the write error is kept.
    if not isinstance(answer, Ok):
        raise NoAnswer("the response was taken twice")
    if not isinstance(answer.value, Ok):
        raise NoAnswer(answer.value.value, unwritten)
    response = answer.value.value
    status = response.status()
    with response.headers() as received:
        pairs = [
            (name.lower(), value.decode("utf-8", "replace")) for name, value in received.entries()
        ]
    content = b""
    with response.consume() as incoming:
        with incoming.stream() as reader:
            while len(content) < READ_AT_MOST:
                try:
                    content += reader.blocking_read(READ_AT_MOST - len(content))
                except Err:
                    break  # the end of the body (or a broken stream): what came is kept
    return Answer(status, pairs, content)

"""The two Python helpers that POST through `wasi:http` — this plugin's `outbound.py` and the
`webhook.py` that `jobrelay plugin new --lang python` writes — natively, against a stand-in for
the host's HTTP types that behaves like wasmtime's where it matters:

- the request body's stream is a channel of two pieces that nothing drains until the request
  is handed to `outgoing_handler.handle` (so a first piece of up to 4,096 bytes written with
  `blocking_write_and_flush` gets through and the second blocks); after that the connection
  takes what was written (here: when the guest waits on the stream's pollable, so
  `check_write` is 0 whenever both pieces are in use);
- `check_write` says how much one `write` may carry (more is a trap), and
  `blocking_write_and_flush` takes at most 4,096 bytes;
- the stream must be gone before the body is finished.

A helper that writes the body before `handle` blocks for ever here (the stand-in raises
`Blocked`), as it does in the host. The real thing is `host/tests/webhook_notify.rs` and
`host/tests/plugin_new.rs`, which post the same sizes through real components.
"""

import importlib
import importlib.util
import os
import sys
import types
import unittest
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = os.path.join(HERE, "..")
TEMPLATE = os.path.join(HERE, "..", "..", "..", "host", "src", "cli", "plugin", "new", "webhook.py")

# What the host takes per write once the request is handed over (wasmtime's is 1 MiB; smaller
# here, so a body takes several pieces).
PERMIT = 16 * 1024
SIZES = (0, 4095, 4096, 4097, 64 * 1024, 1 << 20)


class Blocked(Exception):
    """The guest waits on something that never becomes ready: in the host, until its time
    limit."""


class Trap(Exception):
    """What the host would trap on."""


class Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class Ok:
    def __init__(self, value):
        self.value = value


class Resource:
    """A `wasi:http` resource: usable in `with`, dropped at its end."""

    dropped = False

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.dropped = True


class Host:
    """One request's worth of host state, and what the guest did to it."""

    def __init__(self, status=204, headers=(), body=b""):
        self.handled = False
        self.events = []
        self.pending = 0  # pieces written and not yet taken by the connection
        self.sent = bytearray()
        self.request_headers = []
        self.finished = False
        self.flushed = False
        self.answer = (status, list(headers), body)


class Pollable(Resource):
    def __init__(self, ready):
        self.ready = ready

    def block(self):
        if not self.ready():
            raise Blocked("waiting on a pollable that never becomes ready")


# Pieces the body's channel holds (wasmtime's: its buffer of one chunk, plus one).
CAPACITY = 2


class OutputStream(Resource):
    def __init__(self, host):
        self.host = host

    def check_write(self):
        return 0 if self.host.pending >= CAPACITY else PERMIT

    def subscribe(self):
        """Ready when the channel has room; the connection empties it once handed over."""

        def ready():
            if self.host.handled:
                self.host.pending = 0
            return self.host.pending < CAPACITY

        return Pollable(ready)

    def write(self, data):
        if len(data) > self.check_write():
            raise Trap(f"write of {len(data)} bytes exceeded the budget of {self.check_write()}")
        self.host.events.append(("write", len(data), self.host.handled))
        self.host.sent += data
        self.host.pending += 1

    def blocking_write_and_flush(self, data):
        if len(data) > 4096:
            raise Trap("Buffer too large for blocking-write-and-flush (expected at most 4096)")
        if self.check_write() == 0:
            self.subscribe().block()
        self.write(data)
        self.subscribe().block()

    def blocking_flush(self):
        self.subscribe().block()
        self.host.flushed = True


class OutgoingBody(Resource):
    def __init__(self, host):
        self.host = host
        self.stream = None

    def write(self):
        self.stream = OutputStream(self.host)
        return self.stream

    @staticmethod
    def finish(body, trailers):
        if body.stream is not None and not body.stream.dropped:
            raise Trap("finish before the body's stream is dropped")
        body.host.finished = True


class Fields(Resource):
    def __init__(self, pairs):
        self.pairs = list(pairs)

    @classmethod
    def from_list(cls, pairs):
        for name, value in pairs:
            if not isinstance(value, bytes):
                raise Trap(f"header {name} is not bytes")
        return cls(pairs)

    def entries(self):
        return list(self.pairs)

    def get(self, name):
        return [v for n, v in self.pairs if n.lower() == name.lower()]


class InputStream(Resource):
    def __init__(self, data):
        self.data = data

    def blocking_read(self, n):
        if not self.data:
            raise Err("closed")
        piece, self.data = self.data[:n], self.data[n:]
        return piece


class IncomingBody(Resource):
    def __init__(self, data):
        self.data = data

    def stream(self):
        return InputStream(self.data)


class IncomingResponse(Resource):
    def __init__(self, status, headers, body):
        self._status, self._headers, self._body = status, headers, body

    def status(self):
        return self._status

    def headers(self):
        return Fields([(n, v.encode()) for n, v in self._headers])

    def consume(self):
        return IncomingBody(self._body)


class FutureResponse(Resource):
    def __init__(self, host):
        self.host = host

    def subscribe(self):
        # The answer comes once the whole body arrived (a server that reads it first).
        return Pollable(lambda: self.host.finished)

    def get(self):
        if not self.host.finished:
            return None
        return Ok(Ok(IncomingResponse(*self.host.answer)))


def install(host):
    """Puts the stand-ins where the helpers import them from, for `host`."""

    class OutgoingRequest(Resource):
        def __init__(self, fields):
            host.request_headers = fields.entries()
            self.outgoing = OutgoingBody(host)

        def set_method(self, method):
            self.method = method

        def set_scheme(self, scheme):
            self.scheme = scheme

        def set_authority(self, authority):
            self.authority = authority

        def set_path_with_query(self, path):
            self.path = path

        def body(self):
            return self.outgoing

    def handle(request, options):
        host.events.append(("handle",))
        host.handled = True
        return FutureResponse(host)

    http = SimpleNamespace(
        Fields=Fields,
        OutgoingRequest=OutgoingRequest,
        OutgoingBody=OutgoingBody,
        Method_Post=lambda: "POST",
        Scheme_Http=lambda: "http",
        Scheme_Https=lambda: "https",
    )
    world = types.ModuleType("wit_world")
    imports = types.ModuleType("wit_world.imports")
    imports.outgoing_handler = SimpleNamespace(handle=handle)
    imports.wasi_http_types = http
    world.imports = imports
    cpt = types.ModuleType("componentize_py_types")
    cpt.Err, cpt.Ok = Err, Ok
    sys.modules.update(
        {"wit_world": world, "wit_world.imports": imports, "componentize_py_types": cpt}
    )


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TARGET = SimpleNamespace(scheme="http", authority="127.0.0.1:9", path_with_query="/hooks/x")


def post_outbound(body, host):
    install(host)
    outbound = load(os.path.join(PLUGIN, "outbound.py"), "outbound_under_test")
    return outbound.post(TARGET, [("content-type", "application/octet-stream")], body)


def post_template(body, host):
    install(host)
    webhook = load(TEMPLATE, "webhook_under_test")
    return webhook.post("http://127.0.0.1:9/hooks/x", body, [("content-type", "text/plain")])


class Helpers(unittest.TestCase):
    def check_sizes(self, post):
        for size in SIZES:
            with self.subTest(size=size):
                body = bytes(i % 251 for i in range(size))
                host = Host(429, [("Retry-After", "7")], b"slow down")
                answer = post(body, host)
                self.assertEqual(host.events[0], ("handle",), "handed over before any write")
                self.assertTrue(all(handled for _, _, handled in host.events[1:]))
                self.assertEqual(bytes(host.sent), body)
                self.assertTrue(host.flushed or size == 0)
                self.assertTrue(host.finished)
                lengths = [v for n, v in host.request_headers if n.lower() == "content-length"]
                self.assertEqual(lengths, [str(size).encode()])
                self.assertEqual(answer.status, 429)
                self.assertEqual(answer.header("retry-after"), "7")
                self.assertEqual(answer.header("Retry-After"), "7")
                self.assertIn(("retry-after", "7"), answer.headers)
                self.assertEqual(answer.body, b"slow down")

    def test_outbound_posts_any_size_after_handle(self):
        self.check_sizes(post_outbound)

    def test_the_template_posts_any_size_after_handle(self):
        self.check_sizes(post_template)

    def test_the_template_answer_unpacks(self):
        status, headers, body = post_template(b"x", Host(200, [("X-A", "b")], b"ok"))
        self.assertEqual((status, headers, body), (200, [("x-a", "b")], b"ok"))

    def test_a_body_written_before_handle_blocks_in_the_stand_in(self):
        # What the old helpers did (write in 4,096-byte pieces, then hand over): the first
        # piece gets through, the second never does — a body over 4 KiB never left.
        host = Host()
        body = OutgoingBody(host)
        with body.write() as stream:
            stream.blocking_write_and_flush(b"x" * 4096)
            with self.assertRaises(Blocked):
                stream.blocking_write_and_flush(b"x")


if __name__ == "__main__":
    unittest.main()

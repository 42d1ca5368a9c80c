"""webhook-notify: posts each job event it is given to a webhook, as a CloudEvent (and each
fleet event, when its manifest asks for them, as one of type `io.jobrelay.fleet.<kind>`).

A generic sink, written in Python and built into a WebAssembly component with componentize-py
against the contract (`wit/plugin.wit`) plus `wasi:http/outgoing-handler` (world
`plugin-with-http`, assembled by `plugins/build.sh`). Meant for `delivery: transitions`: one
POST per phase change, to the configured `url`, as a CloudEvent 1.0 in structured or binary
mode, signed the Standard Webhooks way when a `secret` is set. Events whose phase is not in
`phases` are skipped (handled, nothing sent).

The receiver's answer decides the event's fate (`answer.py`): a 2xx delivers it; a 429 defers
it (the host's `deferral`: its `Retry-After`, no retry attempt spent); 408, 425, 5xx and no
answer make the host retry it with backoff, keeping the job's order; anything else — and a
destination the host refuses — gives it up (dead-lettered). Nothing is kept
between events: no key-value store, so a receiver dedupes on the CloudEvent id / `webhook-id`
(or on `transitionkey`, per transition).

The modules: `settings` (the config), `cloudevent` (the request), `answer` (the outcome),
`outbound` (the wasi:http call); only this one and `outbound` need the generated `wit_world`.
"""

import time

import wit_world
from componentize_py_types import Err
from wit_world.imports import deferral, log

# The contract's `types` (the world also imports wasi:http's, hence the longer name).
from wit_world.imports import jobrelay_plugin_types as types

import answer
import cloudevent
import outbound
from settings import PHASES, ConfigError, Settings

# The contract's phases are the ones the settings know, by the same names.
assert tuple(p.name.lower() for p in types.Phase) == PHASES

# What `init` read from the manifest's `config:`; every instance runs `init` before `handle`.
loaded = None


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global loaded
        try:
            loaded = Settings(config)
        except ConfigError as error:
            raise Err(str(error))

    def handle(self, event):
        settings = loaded
        if settings is None:
            raise Err(types.HandlerError_GiveUp("handle called before init"))
        phase = cloudevent.phase_name(event.phase)
        subject = f"{event.namespace}/{event.name}"
        if phase not in settings.phases:
            log.write(log.Level.DEBUG, f"{event.kind} {subject} {phase}: not in `phases`, skipped")
            return
        headers, body = cloudevent.encode(event, settings)
        what = f"{event.kind} {subject} {phase}: {cloudevent.TYPE_PREFIX}{phase}"
        post(settings, event.id, headers, body, what)

    def handle_fleet(self, event):
        """A fleet event (only for a manifest that lists `fleet_events`): posted as a CloudEvent
        of type `io.jobrelay.fleet.<kind>` whatever `phases` says, answered like a job's."""
        settings = loaded
        if settings is None:
            raise Err(types.HandlerError_GiveUp("handle_fleet called before init"))
        headers, body = cloudevent.encode_fleet(event, settings)
        kind = cloudevent.fleet_kind_name(event.kind)
        what = f"fleet event on {event.cluster}: {cloudevent.FLEET_TYPE_PREFIX}{kind}"
        post(settings, event.id, headers, body, what)


def post(settings, message_id, headers, body, what):
    """Posts one request (signed when a `secret` is set) and turns the receiver's answer into
    the handler's: returns when delivered, else raises the `retry` or `give-up` to answer."""
    target = settings.target
    if settings.key is not None:
        headers = cloudevent.sign(headers, settings.key, message_id, int(time.time()), body)
    wait = None
    try:
        reply = outbound.post(target, headers, body)
    except outbound.NoAnswer as error:
        outcome, message = answer.no_answer(error.code, target, settings.secret, error.detail)
    except outbound.BadHeader as error:
        outcome = answer.GIVE_UP
        message = f"the host's HTTP layer refused the header `{error.name}`"
    else:
        wait = reply.header("retry-after")
        outcome, message = answer.by_status(reply.status, reply.body, target, settings.secret)
    if outcome == answer.DELIVERED:
        log.write(log.Level.INFO, f"{what} posted, {message}")
        return
    if outcome == answer.THROTTLED:
        seconds = answer.retry_after(wait) or answer.THROTTLE_SECONDS
        deferral.defer(seconds)
        raise Err(types.HandlerError_Retry(f"{message}; again in {seconds} s"))
    if outcome == answer.RETRY:
        raise Err(types.HandlerError_Retry(message))
    raise Err(types.HandlerError_GiveUp(message))

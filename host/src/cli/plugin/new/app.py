"""{{name}}: a jobrelay plugin in Python.

It counts the failures of jobs per namespace in its key-value store and logs each one; with
`webhook_url` in its config (and that destination in the manifest's `grants.http.allow`) it
also posts each one there as JSON, through `webhook.py`.
Change `handle` to do what your team needs; `jobrelay plugin run {{name}}.wasm --event events/`
tries it, `jobrelay plugin test tests/cases --wasm {{name}}.wasm` runs its recorded cases.

The contract is `wit/plugin.wit`: `init` gets the manifest's `config:` pairs, `handle` one job
event, `handle_fleet` one fleet event (only if the manifest asks for them); raise `Err(...)` to
fail (`types.HandlerError_Retry` to be called again later,
`types.HandlerError_GiveUp` to give the event up). Every event gets a fresh instance by
default: keep nothing in globals between events, except the settings `init` reads.
"""

import json

import webhook
import wit_world
from componentize_py_types import Err
from wit_world.imports import deferral, kv, log
# The contract's `types` (the world also imports wasi:http's, hence the longer name).
from wit_world.imports import jobrelay_plugin_types as types

PHASES = {
    "pending": types.Phase.PENDING,
    "running": types.Phase.RUNNING,
    "restarting": types.Phase.RESTARTING,
    "suspended": types.Phase.SUSPENDED,
    "succeeded": types.Phase.SUCCEEDED,
    "failed": types.Phase.FAILED,
    "terminating": types.Phase.TERMINATING,
    "deleted": types.Phase.DELETED,
    "unknown": types.Phase.UNKNOWN,
    "queued": types.Phase.QUEUED,
    "preempted": types.Phase.PREEMPTED,
}
NAMES = {phase: name for name, phase in PHASES.items()}

# The phases counted: the manifest's `config: {phases: "failed,restarting"}`.
counted = None
# Where each counted failure is posted, if anywhere: `config: {webhook_url: "https://…"}`.
webhook_url = None


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global counted, webhook_url
        values = dict(config)
        unknown = sorted(set(values) - {"phases", "webhook_url"})
        if unknown:
            raise Err(f"config `{unknown[0]}`: unknown key (known: phases, webhook_url)")
        webhook_url = values.get("webhook_url") or None
        if webhook_url is not None and not webhook_url.startswith(("http://", "https://")):
            raise Err(f"config `webhook_url`: `{webhook_url}` is not an http:// or https:// URL")
        phases = []
        for name in values.get("phases", "failed").split(","):
            name = name.strip().lower()
            if name not in PHASES:
                raise Err(f"config `phases`: `{name}` is not a phase (known: {', '.join(PHASES)})")
            phases.append(PHASES[name])
        counted = phases

    def handle(self, event):
        # Only transitions into a counted phase: a job's later versions in the same phase are
        # not counted again.
        if event.phase not in counted or event.previous_phase == event.phase:
            return
        # A failed host call is worth retrying: the event comes again later. (After a host
        # restart an event can come again too: where a count must be exact, dedupe on
        # `event.id`.)
        key = "failures/" + event.namespace
        try:
            stored = kv.get(key)
            count = (json.loads(stored) if stored is not None else 0) + 1
            kv.set(key, json.dumps(count).encode(), None)
        except Err as error:
            raise Err(types.HandlerError_Retry(f"kv: {error.value}"))
        log.write(
            log.Level.WARN,
            f"{event.kind} {event.namespace}/{event.name} is {NAMES[event.phase]} "
            f"({count} in this namespace so far)",
        )
        if webhook_url is None:
            return
        message = {
            "text": f"{event.kind} {event.namespace}/{event.name} is {NAMES[event.phase]}",
            "cluster": event.cluster,
            "namespace": event.namespace,
            "name": event.name,
            "phase": NAMES[event.phase],
            "reason": event.reason,
            "count": count,
        }
        try:
            reply = webhook.post(
                webhook_url,
                json.dumps(message).encode(),
                [("content-type", "application/json")],
            )
        except Err as error:
            raise Err(types.HandlerError_Retry(f"webhook: {error.value}"))
        # Throttled: again when the receiver's `Retry-After` (seconds) says, spending no retry
        # attempt. Failing on the other side: again later. Refused: giving up.
        if reply.status == 429:
            wait = (reply.header("retry-after") or "").strip()
            if wait.isdigit():
                deferral.defer(int(wait))
            raise Err(types.HandlerError_Retry(f"webhook answered 429 (Retry-After: {wait or '-'})"))
        if reply.status >= 500:
            raise Err(types.HandlerError_Retry(f"webhook answered {reply.status}"))
        if reply.status >= 300:
            raise Err(types.HandlerError_GiveUp(f"webhook answered {reply.status}"))

    def handle_fleet(self, event):
        # Fleet events (a cluster offline or back online, a fleet rule firing or resolved) come
        # only if the manifest asks for them (`fleet_events: [clusters, rules]`). This plugin
        # asks for none, so this is never called; acknowledge and drop.
        return

"""{{name}}: a jobrelay plugin in Python.

It counts the failures of jobs per namespace in its key-value store and logs each one.
Change `handle` to do what your team needs; `jobrelay plugin run {{name}}.wasm --event events/`
tries it, `jobrelay plugin test tests/cases --wasm {{name}}.wasm` runs its recorded cases.

The contract is `wit/plugin.wit`: `init` gets the manifest's `config:` pairs, `handle` one job
event; raise `Err(...)` to fail (`types.HandlerError_Retry` to be called again later,
`types.HandlerError_GiveUp` to give the event up). Every event gets a fresh instance by
default: keep nothing in globals between events, except the settings `init` reads.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import kv, log, types

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
}
NAMES = {phase: name for name, phase in PHASES.items()}

# The phases counted: the manifest's `config: {phases: "failed,restarting"}`.
counted = None


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global counted
        values = dict(config)
        unknown = sorted(set(values) - {"phases"})
        if unknown:
            raise Err(f"config `{unknown[0]}`: unknown key (known: phases)")
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

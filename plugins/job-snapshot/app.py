"""job-snapshot: keeps the last object of every job that finishes, as one JSON document in the
archive, for post-mortems and audits after the job itself is gone from the cluster.

A jobrelay plugin written in Python, built into a WebAssembly component with componentize-py
against the same WIT as the Rust plugins (`wit/plugin.wit`), and run by the host with the same
grants and limits. On a transition into one of the configured phases (default: succeeded and
failed) it writes `<cluster>/<namespace>/<name>/<uid>/<phase>.json` under its archive prefix:
the event's fields and the job's whole object as the cluster last showed it. Each transition is
written once: its `transition_key` is remembered in the plugin's key-value store for 30 days, so
an event delivered again after a host restart does not write again.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import archive, kv, log, types

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

# How long a written transition is remembered (the host's redelivery window is far shorter).
REMEMBER_SECONDS = 30 * 24 * 3600

# What `init` read from the manifest's `config:`; every instance runs `init` before `handle`.
settings = None


class Settings:
    """The manifest's `config:` map: `phases` (comma-separated phase names) and `pretty`
    (`true` to indent the documents)."""

    KEYS = ("phases", "pretty")

    def __init__(self, config):
        values = dict(config)
        unknown = sorted(set(values) - set(self.KEYS))
        if unknown:
            raise ValueError(
                f"config `{unknown[0]}`: unknown key (known: {', '.join(self.KEYS)})"
            )
        self.phases = []
        for name in values.get("phases", "succeeded,failed").split(","):
            name = name.strip().lower()
            if not name:
                continue
            if name not in PHASES:
                raise ValueError(
                    f"config `phases`: `{name}` is not a phase (known: {', '.join(PHASES)})"
                )
            self.phases.append(PHASES[name])
        if not self.phases:
            raise ValueError("config `phases`: name at least one phase")
        pretty = values.get("pretty", "false").strip().lower()
        if pretty not in ("true", "false"):
            raise ValueError(f"config `pretty`: expected true or false, got `{pretty}`")
        self.indent = 2 if pretty == "true" else None


def document(event):
    """The archived document: the event's fields, then the job's object."""
    try:
        obj = json.loads(event.object_json) if event.object_json else None
    except ValueError:
        # Kept as text rather than lost: the cluster sent it this way.
        obj = event.object_json
    return {
        "cluster": event.cluster,
        "api_version": event.api_version,
        "kind": event.kind,
        "namespace": event.namespace,
        "name": event.name,
        "uid": event.uid,
        "phase": NAMES[event.phase],
        "previous_phase": NAMES.get(event.previous_phase),
        "raw_phase": event.raw_phase,
        "reason": event.reason,
        "message": event.message,
        "transition_time": event.transition_time,
        "resource_version": event.resource_version,
        "event_id": event.id,
        "transition_key": event.transition_key,
        "labels": dict(event.labels),
        "object": obj,
    }


def failed_call(what, error):
    """A host call's error as the handler's answer: a store that is down is worth a retry,
    anything else is not."""
    if isinstance(error, archive.Error_Unavailable):
        return Err(types.HandlerError_Retry(f"{what}: {error.value}"))
    value = getattr(error, "value", error)
    return Err(types.HandlerError_GiveUp(f"{what}: {value}"))


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global settings
        try:
            settings = Settings(config)
        except ValueError as error:
            raise Err(str(error))

    def handle(self, event):
        if settings is None:
            raise Err(types.HandlerError_GiveUp("handle called before init"))
        if event.phase not in settings.phases or event.previous_phase == event.phase:
            return
        seen = "written/" + event.transition_key
        try:
            if kv.get(seen) is not None:
                return
        except Err as error:
            raise Err(types.HandlerError_Retry(f"kv: {error.value}"))
        key = "/".join(
            [event.cluster, event.namespace, event.name, event.uid, NAMES[event.phase] + ".json"]
        )
        body = json.dumps(document(event), indent=settings.indent, sort_keys=False)
        try:
            archive.put(key, body.encode("utf-8"))
        except Err as error:
            raise failed_call(f"archiving {key}", error.value)
        try:
            kv.set(seen, b"1", REMEMBER_SECONDS)
        except Err as error:
            # Written, but not remembered: a redelivery would write the same document again,
            # which is harmless; the event itself is done.
            log.write(log.Level.WARN, f"kv: {error.value}")
        log.write(
            log.Level.INFO,
            f"{event.kind} {event.namespace}/{event.name} {NAMES[event.phase]}: snapshot {key}",
        )

    def handle_fleet(self, event):
        """Fleet events carry no job object to keep: each is acknowledged and dropped."""
        return

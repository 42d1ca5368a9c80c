"""The manifest's `config:` map, read and checked completely by `init`.

Plain Python (no `wit_world`), so it runs natively in the unit tests too. Every error names the
key and what is wrong with it, and never repeats the URL's path or query or the secret: the
message is reported to the operator and kept in the host's logs.
"""

import base64
import binascii
import json
import string
from urllib.parse import urlsplit

# Exactly the WIT phase names (`types.Phase` lower-cased), in the contract's order.
PHASES = (
    "pending",
    "running",
    "restarting",
    "suspended",
    "succeeded",
    "failed",
    "terminating",
    "deleted",
    "unknown",
    "queued",
    "preempted",
)

# The event fields `template` and `source` may name as `${field}`.
FIELDS = (
    "cluster",
    "namespace",
    "name",
    "kind",
    "uid",
    "phase",
    "raw_phase",
    "reason",
    "message",
    "transition_time",
    "transition_key",
    "id",
)

MODES = ("structured", "binary")
DEFAULT_SOURCE = "/jobrelay/${cluster}"
DEFAULT_CONTENT_TYPE = "application/json"
# Shorter parts of a URL (`/`, `/v1`) are not scrubbed from messages: replacing them everywhere
# would only garble the text, and real tokens are far longer.
MIN_HIDDEN = 8

KEYS = (
    "content_type",
    "include_object",
    "mode",
    "phases",
    "secret",
    "source",
    "template",
    "url",
)


class ConfigError(ValueError):
    """A config the plugin refuses; the text names the key."""


def is_json(content_type):
    """Whether a media type is JSON: `application/json` or any `…+json`, parameters aside."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class Target:
    """Where requests go: the parts `wasi:http` wants, and the only form ever shown."""

    def __init__(self, url):
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            raise ConfigError("config `url`: contains spaces or control characters")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ConfigError("config `url`: must be an absolute http:// or https:// URL")
        if not parts.hostname:
            raise ConfigError(f"config `url`: {scheme}:// without a host")
        if "@" in parts.netloc:
            raise ConfigError("config `url`: credentials in the URL are not supported")
        try:
            parts.port
        except ValueError:
            raise ConfigError("config `url`: the port is not a number from 0 to 65535") from None
        self.scheme = scheme
        self.authority = parts.netloc
        # The fragment is never sent over HTTP.
        self.path_with_query = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # What may be shown in a message: no path, no query (either may carry a token).
        self.shown = f"{scheme}://{parts.netloc}"
        # What must never be shown, wherever a server or the host might repeat it: the path,
        # its last segment (where a token usually is) and the query's values. Longest first,
        # so a value inside another is not half-replaced.
        hidden = [parts.path, parts.path.rstrip("/").rsplit("/", 1)[-1]]
        hidden += [value for _, _, value in (p.partition("=") for p in parts.query.split("&"))]
        self.hidden = sorted({h for h in hidden if len(h) >= MIN_HIDDEN}, key=len, reverse=True)


def signing_key(secret):
    """The HMAC key of a Standard Webhooks secret: base64 after `whsec_`, else the raw bytes."""
    if secret.startswith("whsec_"):
        try:
            key = base64.b64decode(secret[len("whsec_"):], validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                "config `secret`: the part after `whsec_` is not valid base64 "
                "(leave the prefix out to sign with the secret's own bytes)"
            ) from None
        if not key:
            raise ConfigError("config `secret`: nothing after `whsec_`")
        return key
    return secret.encode("utf-8")


def check_template(key, text, allowed):
    """A `string.Template` whose placeholders are all in `allowed`."""
    template = string.Template(text)
    if not template.is_valid():
        raise ConfigError(
            f"config `{key}`: a `$` that starts no placeholder; write `${{field}}` for a field "
            "and `$$` for a dollar sign"
        )
    for identifier in template.get_identifiers():
        if identifier not in allowed:
            raise ConfigError(
                f"config `{key}`: unknown placeholder `${{{identifier}}}` "
                f"(known: {', '.join(allowed)})"
            )
    return template


def flag(values, key):
    value = values.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"config `{key}`: expected true or false, got `{value}`")
    return value == "true"


class Settings:
    """What `init` read: see the README's keys table (the schema's descriptions)."""

    def __init__(self, config):
        values = dict(config)
        unknown = sorted(set(values) - set(KEYS))
        if unknown:
            raise ConfigError(f"config `{unknown[0]}`: unknown key (known: {', '.join(KEYS)})")

        if not values.get("url"):
            raise ConfigError("config `url`: required (where the events are posted)")
        self.target = Target(values["url"])

        mode = values.get("mode", "structured").strip().lower()
        if mode not in MODES:
            raise ConfigError(f"config `mode`: `{mode}` is not a mode (known: {', '.join(MODES)})")
        self.mode = mode

        self.secret = values.get("secret")
        self.key = None
        if self.secret is not None:
            if self.secret == "":
                raise ConfigError(
                    "config `secret`: must not be empty (leave the key out to send unsigned)"
                )
            self.key = signing_key(self.secret)

        self.phases = set()
        for name in values.get("phases", ",".join(PHASES)).split(","):
            name = name.strip().lower()
            if not name:
                continue
            if name not in PHASES:
                raise ConfigError(
                    f"config `phases`: `{name}` is not a phase (known: {', '.join(PHASES)})"
                )
            self.phases.add(name)
        if not self.phases:
            raise ConfigError("config `phases`: name at least one phase")

        self.source = check_template("source", values.get("source", DEFAULT_SOURCE), FIELDS)
        if not values.get("source", DEFAULT_SOURCE).strip():
            raise ConfigError("config `source`: must not be empty")

        self.include_object = flag(values, "include_object")
        self.template = None
        self.content_type = DEFAULT_CONTENT_TYPE
        if "template" in values:
            if self.include_object:
                raise ConfigError(
                    "config `include_object`: only without `template` (the template decides "
                    "the data)"
                )
            if not values["template"]:
                raise ConfigError("config `template`: must not be empty (leave the key out)")
            self.content_type = values.get("content_type", DEFAULT_CONTENT_TYPE).strip()
            if (
                "/" not in self.content_type.split(";", 1)[0]
                or any(ord(c) < 0x20 or ord(c) == 0x7F for c in self.content_type)
            ):
                raise ConfigError(
                    f"config `content_type`: `{self.content_type}` is not a media type "
                    "(e.g. application/json, text/plain; charset=utf-8)"
                )
            self.template = check_template("template", values["template"], FIELDS)
            if is_json(self.content_type):
                # Values are inserted JSON-escaped, so a template that is JSON with any values
                # is JSON with these: a placeholder outside a string shows here.
                sample = self.template.substitute({field: "x" for field in FIELDS})
                try:
                    json.loads(sample)
                except ValueError as error:
                    raise ConfigError(
                        f"config `template`: not JSON once rendered, as content_type "
                        f"`{self.content_type}` says it is ({error}); put each placeholder "
                        "inside a JSON string"
                    ) from None
        elif "content_type" in values:
            raise ConfigError("config `content_type`: only with `template` (the data's type)")
        self.json_data = is_json(self.content_type)

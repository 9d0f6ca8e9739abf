"""What a server says never reaches a terminal or a report unfiltered.

Why: a bench talks to servers we do not control (`--url` anything). A server can echo the API key
we sent, put terminal escape sequences in a model id or an answer (retitle the terminal, clear the
screen, hide text), and a URL typed by a user can carry `user:password@`. Every string that came
from a server passes `clean` before it is printed or stored; every known secret is replaced by
`scrub`; credentials are lifted out of a URL before it is stored anywhere.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"

# ESC-introduced sequences (CSI, OSC up to BEL/ST, DCS/PM/APC strings, two-byte ESC x), then any
# other C0/C1 control character except tab and newline.
_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC / DCS / PM / APC / SOS string
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def clean(text: str) -> str:
    """`text` without terminal escape sequences or control characters (tab and newline kept)."""
    return _ESCAPE.sub("", text)


@dataclass(frozen=True)
class Secrets:
    """The secret values of one run (API key, URL password): replaced wherever they would appear."""

    values: tuple[str, ...] = field(default=(), repr=False)

    def scrub(self, text: str) -> str:
        for value in self.values:
            if value:
                text = text.replace(value, REDACTED)
        return text

    def safe(self, text: str) -> str:
        """`clean` then `scrub`: the one filter for anything a server sent us."""
        return self.scrub(clean(text))

    def safe_all(self, value: Any) -> Any:
        """`safe` applied to every string inside a dataclass / list / dict (a record from a tool that
        talked to the server, e.g. the quality run's failed-scenario summaries)."""
        if isinstance(value, str):
            return self.safe(value)
        if isinstance(value, list):
            return [self.safe_all(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.safe_all(v) for v in value)
        if isinstance(value, dict):
            return {k: self.safe_all(v) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self.safe_all(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return dataclasses.replace(value, **changes)
        return value


@dataclass(frozen=True)
class UrlCredentials:
    """A URL with its `user:password@` lifted out (the password never stored, never printed)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def basic_auth(self) -> str | None:
        if self.username is None and self.password is None:
            return None
        pair = f"{self.username or ''}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    @property
    def secret_values(self) -> tuple[str, ...]:
        values = [v for v in (self.password,) if v]
        if self.basic_auth:
            values.append(self.basic_auth.split(" ", 1)[1])
        return tuple(values)


def split_credentials(url: str) -> UrlCredentials:
    """`http://u:p@host:1/v1` → url `http://host:1/v1` + the credentials (for an Authorization header)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return UrlCredentials(url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, password = userinfo.partition(":")
    return UrlCredentials(
        urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment)),
        user or None,
        password if sep else None,
    )

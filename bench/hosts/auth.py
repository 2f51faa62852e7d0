"""Agents and the harness authenticate what they tell each other.

Host agents carry out what the harness posts to a c10d store (start this rank, kill that
one, carry out a fault), and the harness takes their reports (a rank's exit, a clock
offset) as facts its figures are made of. A c10d store has no authentication: anyone
who reaches its port can post. So every message of the agent protocol is *sealed*: an
HMAC-SHA256 over the message's scope, its store key and its body, with a secret the
harness and its agents share.

- The **scope** binds a message to one place: a trial's messages carry the trial's
  events directory (unique per run, point and trial), so a message recorded in one
  trial is refused in every other; the run store's assignments carry the nonce the
  agent sent when it joined, so an old assignment replayed to a new agent is refused.
- The **key** binds it to one slot: a command recorded as ``cmd/3`` is refused as
  ``cmd/4``.

A message that fails is refused (never acted on), and logged by whoever refused it.

The secret comes from ``$FTBENCH_SECRET`` or a file named by ``$FTBENCH_SECRET_FILE``
(readable by its owner only), never from the command line (``ps`` would show it). On one
machine the harness makes a fresh secret per run and hands it to the agents it starts
through their environment. A run across hosts without a secret is refused unless every
address is loopback (see :data:`LOOPBACK_SECRET`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECRET_ENV = "FTBENCH_SECRET"
SECRET_FILE_ENV = "FTBENCH_SECRET_FILE"
MIN_CHARS = 16
"""A secret shorter than this is refused: it could be guessed."""


class Forged(ValueError):
    """A message whose MAC does not hold (or that has none)."""


class SecretError(ValueError):
    """No usable secret where one is needed, or one kept where others can read it."""


def new_secret() -> str:
    return secrets.token_hex(32)


def secret_from_environment() -> str | None:
    """The shared secret, from ``$FTBENCH_SECRET_FILE`` or ``$FTBENCH_SECRET``; None if
    neither is set. SecretError for a file others can read or a secret too short."""
    path = os.environ.get(SECRET_FILE_ENV)
    if path:
        try:
            st = os.stat(path)
            text = Path(path).read_text()
        except OSError as err:
            raise SecretError(f"${SECRET_FILE_ENV}={path}: {err.strerror}") from None
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SecretError(f"${SECRET_FILE_ENV}={path}: must belong to uid {os.geteuid()} with mode 0600")
    else:
        text = os.environ.get(SECRET_ENV, "")
        if not text:
            return None
    text = text.strip()
    if len(text) < MIN_CHARS:
        raise SecretError(f"the shared secret must be at least {MIN_CHARS} characters (try: openssl rand -hex 32)")
    return text


def loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


LOOPBACK_SECRET = "ftbench: loopback, no secret set"
"""What a loopback run without a secret seals with: both sides know it, so messages keep
their integrity checks but not their authenticity (another user of this machine could
post). Set a secret to close that too."""


def required_secret(address: str, what: str) -> str:
    """The secret for a run whose agents meet at ``address``: one is needed unless the
    address is loopback (then :data:`LOOPBACK_SECRET`: nothing outside this machine takes part)."""
    secret = secret_from_environment()
    if secret is not None:
        return secret
    if loopback(address):
        return LOOPBACK_SECRET
    raise SecretError(
        f"{what} at {address} is reachable from other hosts: set ${SECRET_FILE_ENV} (a file of mode 0600) or "
        f"${SECRET_ENV} to the same secret for the harness and every agent (docs/multihost.md)"
    )


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals and opens the messages of one scope."""

    secret: str
    scope: str

    def _mac(self, key: str, payload: str) -> str:
        data = f"{self.scope}\0{key}\0{payload}".encode()
        return hmac.new(self.secret.encode(), data, hashlib.sha256).hexdigest()

    def seal(self, key: str, body: Any) -> str:
        payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return json.dumps({"body": payload, "mac": self._mac(key, payload)})

    def open(self, key: str, raw: bytes | str) -> Any:
        """The body of a sealed message, or Forged saying why not."""
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise Forged(f"{key}: not a sealed message") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("body"), str) or not isinstance(doc.get("mac"), str):
            raise Forged(f"{key}: not a sealed message")
        if not hmac.compare_digest(self._mac(key, doc["body"]), doc["mac"]):
            raise Forged(f"{key}: the MAC does not match (another secret, another trial, or altered)")
        return json.loads(doc["body"])

"""Secrets the host keeps: provider keys, chat-app tokens, HTTP tokens.

A secret is named, never written in configuration: ``*_env`` names an environment
variable of the daemon, ``*_secret`` an entry of the secrets file (``secrets_file`` in
orchestrator.yaml: a YAML mapping of names to values, readable by its owner only). A
value is read on the host when it is needed and registered for redaction at once, so
no log line shows it; it never reaches a container, a frame, a mount or ``group.yaml``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.redact import register_secret

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
SECRET_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"


class MissingSecret(OrchestratorError):
    """A secret's reference points at nothing (the message names whose, never a value)."""


@dataclass(frozen=True)
class SecretRef:
    """Where a secret comes from: an environment variable or an entry of the secrets
    file (at most one of them; neither: the owner needs none). ``env_key`` and
    ``secret_key`` are the configuration keys that name them, for messages."""

    env: str | None = None
    secret: str | None = None
    env_key: str = "key_env"
    secret_key: str = "key_secret"

    @property
    def given(self) -> bool:
        return bool(self.env or self.secret)

    def describe(self) -> str:
        """Where it comes from, for people (never the value)."""
        if self.env:
            return f"env {self.env}"
        if self.secret:
            return f"secret {self.secret}"
        return "no key"

    def resolve(self, owner: str, secrets_file: Path | None) -> str | None:
        """The value (registered for redaction); None when nothing is named.
        MissingSecret names ``owner`` and what is absent."""
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise MissingSecret(
                    f"{owner}: environment variable {self.env} is not set",
                    hint=f"export {self.env}=... for the daemon, or use {self.secret_key}",
                )
            register_secret(value)
            return value
        if not self.secret:
            return None
        if secrets_file is None:
            raise MissingSecret(
                f"{owner} names secret {self.secret!r} but no secrets_file is configured",
                hint="set secrets_file in orchestrator.yaml",
            )
        value = read_secrets(secrets_file).get(self.secret)
        if not value:
            raise MissingSecret(f"{owner}: {secrets_file} has no entry {self.secret!r}")
        register_secret(value)
        return value

    def require(self, owner: str, secrets_file: Path | None) -> str:
        """As ``resolve``, for an owner that cannot go without it."""
        value = self.resolve(owner, secrets_file)
        if value is None:
            raise MissingSecret(f"{owner} names neither {self.env_key} nor {self.secret_key}")
        return value


def parse_secret_ref(
    item: MappingReader, env_key: str, secret_key: str, *, required: bool
) -> SecretRef:
    """The reference under ``env_key`` / ``secret_key`` of a mapping, validated: at most
    one of them (exactly one when ``required``)."""
    env = item.text(env_key, pattern=ENV_NAME_PATTERN) if env_key in item.data else None
    secret = item.text(secret_key, pattern=SECRET_NAME_PATTERN) if secret_key in item.data else None
    if env and secret:
        raise item.fail(secret_key, f"give {env_key} or {secret_key}, not both")
    if required and not (env or secret):
        raise item.fail(env_key, f"give {env_key} or {secret_key} (one of them)")
    return SecretRef(env, secret, env_key, secret_key)


# path -> (the file's bytes, what they parse to): a model call resolves its key each time
# (a changed file must take effect), but parses the file only when its bytes changed
_parsed: dict[str, tuple[bytes, dict[str, str]]] = {}


def read_secrets(path: Path) -> dict[str, str]:
    """The secrets file: a YAML mapping of names to values, readable by its owner only."""
    import yaml

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MissingSecret(f"secrets file {path} does not exist") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"secrets file {path} is not a regular file")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise BadInput(
            f"secrets file {path} has mode {stat.S_IMODE(st.st_mode):04o}; others may read it",
            hint=f"chmod 600 {path}",
        )
    raw = path.read_bytes()
    known = _parsed.get(str(path))
    if known is not None and known[0] == raw:
        return dict(known[1])
    data = yaml.safe_load(raw.decode("utf-8")) or {}
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise BadInput(f"secrets file {path} must be a mapping of names to text keys")
    _parsed[str(path)] = (raw, dict(data))
    return data

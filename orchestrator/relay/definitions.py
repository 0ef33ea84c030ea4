"""Model providers the operator defines in orchestrator.yaml, and their credentials.

    secrets_file: /etc/orchestrator/secrets.yaml   # optional; mode 0600, else refused
    providers:
      claude:
        kind: anthropic                 # anthropic | openai (any OpenAI-compatible server)
        key_env: ANTHROPIC_API_KEY      # or key_secret: NAME (an entry of secrets_file)
        models: [claude-sonnet-4-5]     # the models groups may use; none listed: any
      local:
        kind: openai
        base_url: http://127.0.0.1:11434/v1   # Ollama, vLLM, llama.cpp, LM Studio ...
        models: [llama3.1]              # a server that needs no key needs no key reference

Keys are read on the host when a call is made; they are never in group.yaml, never
mounted, never in a frame to a container, never in a log line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.redact import register_secret

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

KINDS = ("anthropic", "openai")
DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
PROVIDER_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
OFFLINE = "offline"  # the embedded provider; no definition needed, none allowed
DEFAULT_MAX_TOKENS = 4096


class MissingCredential(OrchestratorError):
    """A provider's key reference points at nothing."""


@dataclass(frozen=True)
class ProviderDef:
    name: str
    kind: str
    base_url: str | None = None
    key_env: str | None = None
    key_secret: str | None = None
    models: tuple[str, ...] = ()  # allowed models; empty: any
    max_tokens: int = DEFAULT_MAX_TOKENS
    stream: bool = True  # consume answers as a stream (false for servers that stream badly)

    @property
    def url(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.kind]

    def key_reference(self) -> str:
        if self.key_env:
            return f"env {self.key_env}"
        if self.key_secret:
            return f"secret {self.key_secret}"
        return "no key"

    def to_dict(self) -> dict[str, object]:
        """For people and JSON: never the key, only where it comes from."""
        return {
            "name": self.name,
            "kind": self.kind,
            "base_url": self.url,
            "key": self.key_reference(),
            "models": list(self.models),
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }


def parse_providers(reader: MappingReader) -> dict[str, ProviderDef]:
    """The ``providers`` mapping of orchestrator.yaml, validated."""
    import re

    out: dict[str, ProviderDef] = {}
    for name in reader.data:
        if not isinstance(name, str) or not re.fullmatch(PROVIDER_NAME_PATTERN, name):
            raise reader.fail(
                str(name),
                "provider names are 1-40 of a-z, 0-9, '-' and '_', starting with a letter or digit",
            )
        if name == OFFLINE:
            raise reader.fail(name, "'offline' is the embedded provider; pick another name")
        item = reader.child(name)
        item.reject_unknown(
            ["kind", "base_url", "key_env", "key_secret", "models", "max_tokens", "stream"]
        )
        kind = item.choice("kind", KINDS, item.raw("kind"))
        base_url = (
            item.text("base_url", pattern=r"https?://\S+", max_chars=512)
            if "base_url" in item.data
            else None
        )
        key_env = item.text("key_env", pattern=ENV_NAME_PATTERN) if "key_env" in item.data else None
        key_secret = (
            item.text("key_secret", pattern=PROVIDER_NAME_PATTERN)
            if "key_secret" in item.data
            else None
        )
        if key_env and key_secret:
            raise item.fail("key_secret", "give key_env or key_secret, not both")
        if kind == "anthropic" and not (key_env or key_secret):
            raise item.fail("kind", "an anthropic provider needs key_env or key_secret")
        models = item.id_list("models", max_chars=200)
        max_tokens = item.whole_number(
            "max_tokens", DEFAULT_MAX_TOKENS, 1, 1_000_000, "1 to 1000000"
        )
        stream = item.boolean("stream", True)
        out[name] = ProviderDef(
            name, kind, base_url, key_env, key_secret, models, max_tokens, stream
        )
    return out


def effective_models(provider: ProviderDef, group_models: tuple[str, ...]) -> tuple[str, ...]:
    """The models a group may use: the provider's list intersected with the group's
    (either empty means no restriction from that side); () when any model is allowed."""
    if not provider.models:
        return group_models
    if not group_models:
        return provider.models
    return tuple(m for m in provider.models if m in group_models)


def model_problem(
    providers: Mapping[str, ProviderDef], provider: str, model: str, group_models: tuple[str, ...]
) -> str | None:
    """Why ``provider``/``model`` cannot be used by a group, or None."""
    if provider == OFFLINE:
        return None
    definition = providers.get(provider)
    if definition is None:
        known = ", ".join([OFFLINE, *sorted(providers)])
        return f"unknown provider {provider!r}; defined: {known} (see: orchestrator provider list)"
    allowed = effective_models(definition, group_models)
    if definition.models and group_models and not allowed:
        return f"no model is allowed both by provider {provider!r} and by this group"
    if allowed and model not in allowed:
        return f"model {model!r} is not allowed for provider {provider!r}; allowed: " + ", ".join(
            allowed
        )
    return None


def read_secrets(path: Path) -> dict[str, str]:
    """The secrets file: a YAML mapping of names to keys, readable by its owner only."""
    import yaml

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MissingCredential(f"secrets file {path} does not exist") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"secrets file {path} is not a regular file")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise BadInput(
            f"secrets file {path} has mode {stat.S_IMODE(st.st_mode):04o}; others may read it",
            hint=f"chmod 600 {path}",
        )
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise BadInput(f"secrets file {path} must be a mapping of names to text keys")
    return data


def resolve_reference(
    owner: str,
    env: str | None,
    secret: str | None,
    secrets_file: Path | None,
    missing: type[OrchestratorError],
    secret_key: str,
) -> str | None:
    """The value an environment variable (``env``) or an entry of the secrets file
    (``secret``) holds, registered for redaction; None when neither is named. ``missing``
    names ``owner`` and what is absent, never a value; its hint names ``secret_key``, the
    other way to give it."""
    if env:
        value = os.environ.get(env)
        if not value:
            raise missing(
                f"{owner}: environment variable {env} is not set",
                hint=f"export {env}=... for the daemon, or use {secret_key}",
            )
        register_secret(value)
        return value
    if not secret:
        return None
    if secrets_file is None:
        raise missing(
            f"{owner} names secret {secret!r} but no secrets_file is configured",
            hint="set secrets_file in orchestrator.yaml",
        )
    value = read_secrets(secrets_file).get(secret)
    if not value:
        raise missing(f"{owner}: {secrets_file} has no entry {secret!r}")
    register_secret(value)
    return value


def resolve_key(provider: ProviderDef, secrets_file: Path | None) -> str | None:
    """The provider's key (None for one that needs none); MissingCredential when its
    reference points at nothing."""
    return resolve_reference(
        f"provider {provider.name!r}",
        provider.key_env,
        provider.key_secret,
        secrets_file,
        MissingCredential,
        "key_secret",
    )

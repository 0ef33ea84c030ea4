"""``providers`` of orchestrator.yaml: the model providers the operator defines, and
where their keys come from (``orchestrator.secrets``).

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
        model_info:                     # what is known of each model, by name
          llama3.1:
            context_tokens: 8192        # its context window (else asked of the server)
            prices: {input: 0, output: 0}   # per million tokens; a local model costs 0
            vision: false               # true: it takes images (shown those of a turn)
    currency: USD                       # the currency of every price (top level)

Prices (``input``, ``output``, and optionally ``cache_read``, ``cache_write``, which are
priced as input when not given) make each call's cost known; a group's money caps
(group.yaml ``limits.cost_per_day``/``cost_per_month``) need its model priced.

Keys are read on the host when a call is made; they are never in group.yaml, never
mounted, never in a frame to a container, never in a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.money import Prices
from orchestrator.protocol import OFFLINE
from orchestrator.secrets import SecretRef, parse_secret_ref

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

KINDS = ("anthropic", "openai")
DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
PROVIDER_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class ModelInfo:
    """What orchestrator.yaml says of one model (``providers.NAME.model_info.MODEL``)."""

    context_tokens: int | None = None  # its context window; None: asked of the server
    prices: Prices | None = None  # per million tokens; None: its calls have no known cost
    vision: bool = False  # it takes images (the host shows it the images of a turn)


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
    model_info: tuple[tuple[str, ModelInfo], ...] = ()  # (model, what is known of it)

    def info(self, model: str) -> ModelInfo:
        return dict(self.model_info).get(model, ModelInfo())

    @property
    def self_hosted(self) -> bool:
        """A server of the operator's own (a base_url other than the vendor's)."""
        return self.base_url is not None and self.base_url != DEFAULT_BASE_URLS[self.kind]

    @property
    def url(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.kind]

    @property
    def key(self) -> SecretRef:
        return SecretRef(self.key_env, self.key_secret, "key_env", "key_secret")

    def key_reference(self) -> str:
        return self.key.describe()

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
            "model_info": {
                m: {
                    "context_tokens": i.context_tokens,
                    "prices": i.prices.to_dict() if i.prices is not None else None,
                    "vision": i.vision,
                }
                for m, i in self.model_info
            },
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
            [
                "kind",
                "base_url",
                "key_env",
                "key_secret",
                "models",
                "max_tokens",
                "stream",
                "model_info",
            ]
        )
        kind = item.choice("kind", KINDS, item.raw("kind"))
        base_url = (
            item.text("base_url", pattern=r"https?://\S+", max_chars=512)
            if "base_url" in item.data
            else None
        )
        key = parse_secret_ref(item, "key_env", "key_secret", required=False)
        if kind == "anthropic" and not key.given:
            raise item.fail("kind", "an anthropic provider needs key_env or key_secret")
        models = item.id_list("models", max_chars=200)
        max_tokens = item.whole_number(
            "max_tokens", DEFAULT_MAX_TOKENS, 1, 1_000_000, "1 to 1000000"
        )
        stream = item.boolean("stream", True)
        out[name] = ProviderDef(
            name,
            kind,
            base_url,
            key.env,
            key.secret,
            models,
            max_tokens,
            stream,
            _model_info(item.child("model_info")),
        )
    return out


def _model_info(reader: MappingReader) -> tuple[tuple[str, ModelInfo], ...]:
    out = []
    for model in reader.data:
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise reader.fail(str(model), "a model's name must be 1-200 characters")
        item = reader.child(model)
        item.reject_unknown(["context_tokens", "prices", "vision"])
        tokens = (
            item.whole_number(
                "context_tokens", None, 256, 100_000_000, "a number of tokens from 256"
            )
            if "context_tokens" in item.data
            else None
        )
        prices = _prices(item.child("prices")) if "prices" in item.data else None
        out.append((model, ModelInfo(tokens, prices, item.boolean("vision", False))))
    return tuple(out)


PRICE_KINDS = ("input", "output", "cache_read", "cache_write")


def _prices(reader: MappingReader) -> Prices:
    """``prices``: per million tokens, each a number from 0 (a local model costs 0)."""
    reader.reject_unknown(list(PRICE_KINDS))
    found: dict[str, float | None] = {}
    for kind in PRICE_KINDS:
        value = reader.raw(kind, None)
        if value is None:
            if kind in ("input", "output"):
                raise reader.fail(
                    kind, "missing; prices need input and output (per million tokens, 0 or more)"
                )
            found[kind] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
            raise reader.fail(
                kind, f"got {value!r}; expected a price per million tokens from 0, such as 3.0"
            )
        found[kind] = float(value)
    return Prices(
        input=found["input"] or 0.0,
        output=found["output"] or 0.0,
        cache_read=found["cache_read"],
        cache_write=found["cache_write"],
    )


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


def resolve_key(provider: ProviderDef, secrets_file: Path | None) -> str | None:
    """The provider's key (None for one that needs none); MissingSecret when its
    reference points at nothing."""
    return provider.key.resolve(f"provider {provider.name!r}", secrets_file)

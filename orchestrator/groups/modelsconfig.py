"""``models`` of group.yaml: a model for each purpose besides the chat's.

    provider: claude                  # the chat's pair, as before
    model: claude-sonnet-4-5
    models:
      tasks: {provider: local, model: llama3.1}      # scheduled tasks' turns
      flush: {provider: local, model: llama3.1}      # memory flushes and summaries
      background: {provider: local, model: llama3.1} # memory housekeeping off a turn

Each pair is validated like the chat's (the provider defined, the model allowed by it
and by ``limits.models``). The host decides which applies from its own records: a turn
of a scheduled task's run is ``tasks``; a flush or a compaction summary the runner asks
for is ``flush`` (a frame can only choose among these, never name a model); everything
else is the chat's. A purpose left out uses the chat's pair (a task run's flush uses
``flush``, else the task's pair). The pairs run on the host, so the group's own provider
must be one the host calls (not ``offline``, which runs inside the container).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.config.providers import ProviderDef, model_problem
from orchestrator.protocol import OFFLINE

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

PURPOSE_KEYS = ("flush", "tasks", "background")
PROVIDER_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    model: str

    def to_dict(self) -> dict[str, str]:
        return {"provider": self.provider, "model": self.model}


@dataclass(frozen=True)
class PurposeModels:
    flush: ModelChoice | None = None
    tasks: ModelChoice | None = None
    background: ModelChoice | None = None

    def pairs(self) -> list[tuple[str, ModelChoice]]:
        """(purpose, choice) of each purpose given."""
        return [(k, c) for k in PURPOSE_KEYS if (c := getattr(self, k)) is not None]

    def to_dict(self) -> dict[str, dict[str, str] | None]:
        return {k: (c.to_dict() if (c := getattr(self, k)) else None) for k in PURPOSE_KEYS}


def parse_models(
    reader: MappingReader,
    group_provider: str,
    allowed: tuple[str, ...],
    providers: Mapping[str, ProviderDef] | None,
) -> PurposeModels:
    """``models``, validated; with ``providers`` (orchestrator.yaml's) each pair must be
    usable as the chat's is."""
    reader.reject_unknown(list(PURPOSE_KEYS))
    found: dict[str, ModelChoice] = {}
    for key in PURPOSE_KEYS:
        if key not in reader.data:
            continue
        item = reader.child(key)
        item.reject_unknown(["provider", "model"])
        provider = item.text("provider", pattern=PROVIDER_PATTERN)
        model = item.text("model", max_chars=200)
        if provider == OFFLINE or group_provider == OFFLINE:
            raise reader.fail(
                key,
                "the offline provider runs inside the container, so purposes can only pick "
                "providers the host calls, and only for a group whose own provider is one "
                f"(this group's provider is {group_provider!r})",
            )
        if providers is not None:
            problem = model_problem(providers, provider, model, allowed)
            if problem is not None:
                raise item.fail("model" if provider in providers else "provider", problem)
        found[key] = ModelChoice(provider, model)
    return PurposeModels(**found)

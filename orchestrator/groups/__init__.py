"""Agent groups: their folders (``store``), their ``group.yaml`` (``config``) and their
disk use (``disk``). The names people import are here."""

from orchestrator.groups.store import (
    Group,
    GroupListing,
    GroupStore,
    folder_from_name,
    memory_usage,
    validate_folder_name,
)

__all__ = [
    "Group",
    "GroupListing",
    "GroupStore",
    "folder_from_name",
    "memory_usage",
    "validate_folder_name",
]

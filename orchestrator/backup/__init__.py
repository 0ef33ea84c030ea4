"""Backups of a home, taken while its daemon runs, and restores into an empty home:
``archive`` (the format, written and read with every member checked), ``create`` (what
goes in, read through the confined file layer), ``restore`` (back into place)."""

from orchestrator.backup.archive import BackupInvalid
from orchestrator.backup.create import BackupReport, create_backup
from orchestrator.backup.restore import RestoreReport, restore_backup, verify_backup

__all__ = [
    "BackupInvalid",
    "BackupReport",
    "RestoreReport",
    "create_backup",
    "restore_backup",
    "verify_backup",
]

"""Error types. Each is caught once, at the CLI edge, and printed as one line plus a hint.

``exit_code`` follows the documented convention: 1 the operation failed, 2 bad usage or
bad input.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PENDING = 3  # the answer was not complete when the command stopped waiting


class OrchestratorError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadInput(OrchestratorError):
    """Input given by the operator (a file, a flag, a name) is not valid."""

    exit_code = EXIT_BAD_INPUT


class InvalidConfig(BadInput):
    """A configuration file (orchestrator.yaml, group.yaml) is not valid."""


class InvalidFolderName(BadInput):
    """A group folder name does not follow the naming rule."""


class GroupNotFound(BadInput):
    """No group has the given name or folder."""


class GroupExists(BadInput):
    """A group with this folder already exists."""


class HomeNotWritable(OrchestratorError):
    """The orchestrator home (or a folder in it) cannot be written."""


class EngineUnreachable(OrchestratorError):
    """The container engine did not answer."""


class EngineError(OrchestratorError):
    """The container engine refused a request."""


class ImageBuildFailed(OrchestratorError):
    """Building the base or agent image failed."""


class ImageMissing(OrchestratorError):
    """The agent image has not been built."""


class MountRefused(BadInput):
    """An extra mount asked for in group.yaml is not allowed."""


class SenderRefused(OrchestratorError):
    """The sender is neither a creator nor a member, and the group drops unknown senders."""


class DaemonNotRunning(OrchestratorError):
    """No daemon answers on the control socket."""


class DaemonStopping(OrchestratorError):
    """The daemon is draining and accepts no new messages."""


class GroupPaused(OrchestratorError):
    """The group is paused and refuses new messages (over its disk limit, say)."""

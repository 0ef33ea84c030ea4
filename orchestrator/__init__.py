"""orchestrator: a self-hosted runtime for chat agents in isolated groups.

Each agent group is a folder ``groups/<folder>/`` and one Docker container; its durable
memory is an OKF v0.1 tree of Markdown files in ``groups/<folder>/memory/``.
"""

__version__ = "0.2.0"

"""A home for the Kubernetes manifests' tests: its own project, and a mount allowlist
that lets its groups mount one shared folder."""

from __future__ import annotations

from pathlib import Path

from orchestrator.home import Home


def home_with_a_shared_folder(tmp_path: Path, project: str) -> tuple[Home, Path]:
    """A home at ``tmp_path``/home of project ``project`` whose allowlist lets a group
    mount, writable, the folder returned (``tmp_path``/shared/docs)."""
    root = tmp_path / "home"
    root.mkdir()
    shared = tmp_path / "shared" / "docs"
    shared.mkdir(parents=True)
    allow = tmp_path / "config" / "allowlist.yaml"
    allow.parent.mkdir()
    allow.write_text(f"roots:\n  - path: {shared.parent}\n    writable: true\n")
    root.joinpath("orchestrator.yaml").write_text(f"project: {project}\nmount_allowlist: {allow}\n")
    return Home(root), shared

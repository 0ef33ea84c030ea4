"""Changing orchestrator.yaml from a command, keeping the operator's comments and order.

The file is read with a round-trip YAML parser (ruamel.yaml: it keeps comments, key order
and quoting, which PyYAML drops), changed, validated as a whole with the same rules as
at load, and written atomically with its mode kept (it may hold a token). A change that
would make the file invalid changes nothing.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable
from typing import Any

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.errors import InvalidConfig
from orchestrator.fsatomic import write_atomic
from orchestrator.home import Home
from orchestrator.versions import CONFIG_FILE_VERSION


def edit_config(home: Home, change: Callable[[Any], None]) -> OrchestratorConfig:
    """Apply ``change`` to the file's top mapping; return the configuration it gives."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError

    yaml = YAML()
    yaml.preserve_quotes = True
    path = home.config_file
    try:
        text = path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        text, mode = "", 0o644
    load_config(home)  # the file as it is must be valid before we change it
    try:
        data = yaml.load(text)
    except YAMLError as exc:
        raise InvalidConfig(f"{path}: cannot be read for editing: {exc}") from None
    prefix = ""
    if data is None:  # empty, or comments only: keep them above the new mapping
        data = CommentedMap()
        data["version"] = CONFIG_FILE_VERSION  # the shape this release writes
        prefix = text if not text or text.endswith("\n") else text + "\n"
    if not isinstance(data, dict):
        raise InvalidConfig(f"{path}: the document must be a mapping")
    change(data)
    out = io.StringIO()
    yaml.dump(data, out)
    new_text = prefix + out.getvalue()
    config = load_config(home, new_text)  # refused here, before anything is written
    home.root.mkdir(parents=True, exist_ok=True)
    write_atomic(path, new_text, mode=mode)
    return config

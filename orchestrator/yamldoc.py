"""YAML documents that remember where each key is, so errors can name file:line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InvalidConfig
from orchestrator.limits import CONFIG_FILE_MAX_BYTES

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: its data and the node tree used to locate keys."""

    path: Path
    data: Any
    root: yaml.Node | None

    def line_of(self, *keys: str | int) -> int | None:
        """1-based line of the value at ``keys`` (or of the nearest parent found)."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for key in keys:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == key:
                        line = key_node.start_mark.line + 1
                        node = value_node
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
                if key >= len(node.value):
                    return line
                node = node.value[key]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    def where(self, *keys: str | int) -> str:
        line = self.line_of(*keys)
        return f"{self.path}:{line}" if line else str(self.path)


def parse_yaml_text(text: str, path: Path) -> YamlDocument:
    """Parse one YAML document; a syntax error becomes InvalidConfig with file:line:column."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        _refuse_alias_loops_and_bombs(root, path)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        reason = exc.problem or exc.context or "invalid YAML"
        raise InvalidConfig(
            f"{place}: malformed YAML: {reason}", hint="fix the YAML syntax at that place"
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidConfig(f"{path}: malformed YAML: {exc}") from None
    finally:
        loader.dispose()
    _refuse_duplicate_keys(root, path)
    return YamlDocument(path=path, data=data, root=root)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _refuse_alias_loops_and_bombs(root: yaml.Node | None, path: Path) -> None:
    """An alias (``*name``) is the very node its anchor (``&name``) names, so a file's
    values are a graph: one whose alias sits inside its own anchor's value is a loop, and
    nine levels of nine aliases name 9**9 values from a few hundred bytes. Both are
    refused (every walk of the document would never end), as is a document of more
    values, aliases expanded, than CONFIG_FILE_MAX_BYTES."""
    sizes: dict[int, int] = {}  # values under a node, aliases expanded
    walking: set[int] = set()  # the nodes on the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)] if root is not None else []
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            walking.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > CONFIG_FILE_MAX_BYTES:
                raise InvalidConfig(
                    f"{path}:{node.start_mark.line + 1}: this value holds more than "
                    f"{CONFIG_FILE_MAX_BYTES} values once its aliases (*name) are expanded",
                    hint="write the values out, or use fewer aliases",
                )
        elif key in walking:
            raise InvalidConfig(
                f"{path}:{node.start_mark.line + 1}: an alias (*name) inside the value its "
                "anchor (&name) names: the value would hold itself without end",
                hint="remove the alias from inside its anchor's value",
            )
        elif key not in sizes:
            walking.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _refuse_duplicate_keys(node: yaml.Node | None, path: Path) -> None:
    """A key given twice in one mapping is refused: YAML would silently keep the last."""
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in current.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise InvalidConfig(
                        f"{path}:{line}: {key}: given twice (also on line {seen[key]})",
                        hint="keep one of them",
                    )
                seen[key] = line
                stack.append(value_node)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def load_yaml_file(path: Path) -> YamlDocument:
    """Read and parse a YAML config file, refusing huge, binary or non-UTF-8 files."""
    return parse_yaml_bytes(read_config_bytes(path), path)


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a config file; InvalidConfig naming it when it is too large, missing,
    a folder or unreadable."""
    try:
        size = os.stat(path).st_size
        if size > CONFIG_FILE_MAX_BYTES:
            raise InvalidConfig(
                f"{path}: file is {size} bytes; config files are limited to "
                f"{CONFIG_FILE_MAX_BYTES} bytes"
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidConfig(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InvalidConfig(f"{path}: is a directory, expected a YAML file") from None
    except PermissionError:
        raise InvalidConfig(f"{path}: permission denied while reading") from None
    return raw


def parse_yaml_bytes(raw: bytes, path: Path) -> YamlDocument:
    """Parse a config file's bytes (``path`` names it in errors); not UTF-8 is refused."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidConfig(
            f"{path}: not UTF-8 text (invalid byte at offset {exc.start})",
            hint="save the file as UTF-8",
        ) from None
    return parse_yaml_text(text, path)

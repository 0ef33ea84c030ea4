"""Fuzzing group.yaml loading (orchestrator/groups/config.py): the file sits in the group's
folder, written by operators and by the CLI's edits. Whatever its bytes, loading gives a
GroupConfig or raises InvalidConfig ("naming file:line, key and value":
group_config_from_doc's docstring) or FileTooNew for a newer release's file
(MappingReader.file_version); never another exception, and never a hang.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.config.providers import ProviderDef
from orchestrator.errors import InvalidConfig
from orchestrator.groups.config import GroupConfig, group_config_from_doc
from orchestrator.templates import render
from orchestrator.versions import GROUP_FILE_VERSION, FileTooNew
from orchestrator.yamldoc import parse_yaml_bytes
from tests.fuzzing import fuzz, mutated

PATH = Path("/srv/home/groups/fam/group.yaml")


def rendered(config: GroupConfig) -> str:
    """group.yaml as ``orchestrator group add`` writes it (GroupStore.add)."""
    return render(
        "group.yaml.j2",
        config=config,
        version=GROUP_FILE_VERSION,
        dumps=lambda v: json.dumps(v, ensure_ascii=False),
    )


# Every section set, in the README's shapes ("group.yaml (one per group)").
SECTIONS = """\
tasks:
  allowed: [creator]
  max: 10
  min_interval: 5m
  grace: 2h
  timezone: Europe/Zurich
packages:
  debian: [tree, jq]
  python: ["requests>=2.31", humanize]
  from_chat: true
tools:
  shell: [creator, member]
media:
  transcribe: off
mounts:
  - {host: /srv/shared-docs, name: docs, writable: false}
skills: [memory, web]
mcp:
  servers:
    time:
      command: mcp-server-time
      args: [--local-timezone, UTC]
      tools: {get_current_time: 0123456789abcdef}
    tracker: {remote: tracker, trust: [creator, member]}
web:
  enabled: true
  trust: [creator, member]
  allow: ['*.wikipedia.org']
  deny: [ads.example]
  ports: [443]
  max_fetches_per_hour: 5
  allow_addresses: ['127.0.0.1:8080']
"""
PLAIN = rendered(GroupConfig(name="Fam"))
FULL = rendered(
    GroupConfig(name="Famille «Ö»", creators=("telegram:1",), members=("email:a@b.org",))
).replace("mounts: []\n", "").replace("skills: all\n", "") + SECTIONS.replace("container:", "")
SEEDS = [PLAIN.encode(), FULL.encode(), b"name: x\n", b"version: 1\nname: y\nlimits: {}\n"]
PROVIDERS = {
    "local": ProviderDef("local", "openai", base_url="http://h:8080/v1", models=("llama",)),
}

# Values that probe validators: wrong types, bounds, odd text and YAML's own scalars.
odd_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        ["", "0", "-1s", "1e999", "5m", "0m", "80%", "101%", "none", "all", "creator",
         "guest", "*", "*.org", "127.0.0.1:8080", "[::1]:80", "UTC", "Etc/GMT+14",
         "../x", "/abs", "~/x", "a" * 300, "\x00", "\u202e", "telegram:1", "x:"]
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=3),
    max_leaves=6,
)  # fmt: skip


@st.composite
def edited(draw: st.DrawFn) -> bytes:
    """The full seed as data, with values at a few random places replaced, dumped again."""
    data = yaml.safe_load(FULL)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        node = data
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if isinstance(node[key], dict | list) and draw(st.booleans()):
                node = node[key]
                continue
            node[key] = draw(odd_values)
            break
    return yaml.safe_dump(data, allow_unicode=True).encode()


documents = st.one_of(
    edited(),
    mutated(SEEDS, max_edits=8),
    st.binary(max_size=60),
    st.text(alphabet="abc:- \n[]{}&*!'\"#?|>%@`,.0123456789", max_size=80).map(str.encode),
)


def load(raw: bytes, providers: dict[str, ProviderDef] | None) -> GroupConfig | None:
    """The config, or None for a refusal the docstrings document."""
    try:
        return group_config_from_doc(parse_yaml_bytes(raw, PATH), providers)
    except InvalidConfig as exc:
        assert str(PATH) in exc.message, exc.message
        return None
    except FileTooNew as exc:
        assert str(PATH) in exc.message
        return None


@fuzz(300)
@given(raw=documents, with_providers=st.booleans())
@example(raw=PLAIN.encode(), with_providers=False)
@example(raw=FULL.encode(), with_providers=True)
@example(raw=b"name: x\nprovider: local\nmodel: llama\n", with_providers=True)
@example(raw=b"[" * 5000, with_providers=False).via("deep flow nesting")
@example(raw=b"- " * 3000 + b"x", with_providers=False).via("deep block nesting")
@example(raw=b"name: !!binary aGk=\n", with_providers=False).via("a binary value")
@example(raw=b"name: x\nturn_timeout: 2001-12-14\n", with_providers=False).via("a date")
@example(raw=b"name: x\n? [a]\n: b\n", with_providers=False).via("a complex key")
@example(raw=b"name: x\n1: b\nnull: c\n", with_providers=False).via("keys not text")
@example(raw=b"name: x\ncontext_budget: .nan\n", with_providers=False)
@example(raw=b"name: x\ncontainer: {cpus: .inf, memory: 1e999}\n", with_providers=False)
@example(raw=b"name: x\nversion: 99999999999999999999999\n", with_providers=False)
@example(raw=b"name: x\nlimits: {cost_per_day: 1e400}\n", with_providers=True)
@example(raw=b"name: x\ntimezone: ../../etc/passwd\n", with_providers=False)
@example(raw=b"name: x\ntasks: {timezone: '\\x00'}\n", with_providers=False)
@example(raw=b"name: x\nweb: {ports: [99999999999999999999]}\n", with_providers=False)
@example(raw=b"\xef\xbb\xbfname: x\n", with_providers=False).via("byte order mark")
def test_any_group_yaml_loads_or_is_refused_clearly(raw: bytes, with_providers: bool) -> None:
    load(raw, PROVIDERS if with_providers else None)


# Anchors and aliases: nine levels of nine references name 9**9 values, from a few hundred
# bytes; loading must not walk them all.
LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)


@fuzz(20)
@given(raw=st.sampled_from([LAUGHS, "name: x\nmembers: " + LAUGHS.replace("\n", " ")]))
@example(raw="name: x\n" + LAUGHS.replace("a9:", "members:"))
def test_aliases_that_name_a_huge_tree_do_not_hang(raw: str) -> None:
    load(raw.encode(), None)


@fuzz(200)
@given(raw=mutated([FULL.encode(), PLAIN.encode()], max_edits=4))
@example(raw=FULL.encode())
def test_a_loaded_config_reads_back_the_same_from_the_template(raw: bytes) -> None:
    # What `group add` writes from a config is that config: the template renders every
    # key it has a line for; the keys it leaves out (mounts, skills, web, ...) are read
    # as defaults from its text.
    config = load(raw, None)
    if config is None:
        return
    again = load(rendered(config).encode(), None)
    assert again is not None
    shown = {
        "name", "provider", "model", "limits", "models", "timezone", "memory", "creators",
        "members", "unknown_senders", "session_mode", "container", "context_budget",
        "turn_timeout_seconds",
    }  # fmt: skip
    for key in shown:
        assert getattr(again, key) == getattr(config, key), key

"""Exact behaviour of the parts around MCP and model requests: the grant of tools a turn
gets (relay/grants.py), images by reference on a model request (relay/images.py), applying
an approved MCP server request (relay/mcp_requests.py) and the blocking link to a server
(mcp/link.py), each on its own, without an engine."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.limits import IMAGE_SOURCE_MAX_BYTES, IMAGES_PER_REQUEST_MAX
from orchestrator.media.images import EncodedImage, ImageCache, ImageRefused
from orchestrator.relay.grants import granted_tools
from orchestrator.relay.images import with_images
from orchestrator.relay.providers.base import ModelCall

BUILT_IN = ("files", "messages", "memory", "tasks", "skills")
TASK_RUN = ("files", "messages", "memory", "list_tasks", "cancel_task", "skills")


# grants


def test_a_persons_turn_with_no_trust_gets_the_built_in_tools_only() -> None:
    assert granted_tools(task_run=False) == BUILT_IN
    assert granted_tools(task_run=True) == TASK_RUN


def test_a_creators_turn_gets_mcp_requests_and_sessions_and_a_task_run_neither() -> None:
    assert granted_tools(task_run=False, trust="creator") == (
        *BUILT_IN,
        "mcp-requests",
        "sessions",
    )
    assert granted_tools(task_run=True, trust="creator") == TASK_RUN


def test_a_members_turn_gets_sessions_but_no_mcp_requests_and_a_guest_neither() -> None:
    assert granted_tools(task_run=False, trust="member") == (*BUILT_IN, "sessions")
    assert granted_tools(task_run=True, trust="member") == TASK_RUN
    assert granted_tools(task_run=False, trust="guest") == BUILT_IN


def test_the_shell_goes_only_to_a_trust_the_group_names() -> None:
    shell = ("creator", "member")
    assert granted_tools(task_run=True, trust="member", shell=shell) == (*TASK_RUN, "shell")
    assert granted_tools(task_run=False, trust="guest", shell=shell) == BUILT_IN
    assert granted_tools(task_run=True, trust=None, shell=shell) == TASK_RUN
    assert granted_tools(task_run=True, trust="guest", shell=("guest",)) == (*TASK_RUN, "shell")


def test_packages_from_the_chat_go_to_a_creators_or_members_turn_not_a_task_run() -> None:
    assert granted_tools(task_run=False, trust="member", packages_from_chat=True) == (
        *BUILT_IN,
        "packages",
        "sessions",
    )
    assert granted_tools(task_run=False, trust="creator", packages_from_chat=True) == (
        *BUILT_IN,
        "packages",
        "mcp-requests",
        "sessions",
    )
    assert granted_tools(task_run=True, trust="creator", packages_from_chat=True) == TASK_RUN
    assert granted_tools(task_run=False, trust="guest", packages_from_chat=True) == BUILT_IN
    assert granted_tools(task_run=False, trust=None, packages_from_chat=True) == BUILT_IN
    assert granted_tools(task_run=False, trust="member", packages_from_chat=False) == (
        *BUILT_IN,
        "sessions",
    )


def test_the_web_and_the_mcp_sources_come_last_in_their_order() -> None:
    assert granted_tools(task_run=True, web=True) == (*TASK_RUN, "web")
    assert granted_tools(task_run=True, web=False, mcp=("mcp:b", "mcp:a")) == (
        *TASK_RUN,
        "mcp:b",
        "mcp:a",
    )
    assert granted_tools(
        task_run=False,
        trust="creator",
        shell=("creator",),
        packages_from_chat=True,
        mcp=("mcp:t",),
        web=True,
    ) == (*BUILT_IN, "shell", "packages", "mcp-requests", "web", "sessions", "mcp:t")


# images


class FakeCache(ImageCache):
    """Encodes by prefixing; refuses bytes that start with b"bad"."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bytes] = []

    def encoded(self, data: bytes) -> EncodedImage:
        self.seen.append(data)
        if data.startswith(b"bad"):
            raise ImageRefused(f"refused {data.decode()}")
        return EncodedImage(b"J" + data, 1, 1, 1, 1, media_type=f"image/x-{data.decode()}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


@pytest.fixture
def groups(tmp_path: Path) -> Path:
    files = tmp_path / "groups" / "fam" / "files"
    files.mkdir(parents=True)
    for name in ("a", "b", "c", "bad1"):
        (files / f"{name}.jpg").write_bytes(name.encode())
    return tmp_path / "groups"


def _shown(call: ModelCall, groups: Path, **kw: Any) -> list[dict[str, Any]]:
    options: dict[str, Any] = {"vision": True, "model": "m-1"} | kw
    return with_images(call, groups, "fam", FakeCache(), **options).messages


def test_a_call_without_images_is_returned_as_it_is(groups: Path) -> None:
    call = ModelCall("s", [{"role": "user", "content": "hi", "images": []}])
    assert with_images(call, groups, "fam", FakeCache(), vision=True, model="m") is call
    # no group folder is even opened
    assert with_images(call, groups, "nofolder", FakeCache(), vision=True, model="m") is call


def test_each_image_becomes_its_data_in_order_and_images_is_dropped(groups: Path) -> None:
    plain = {"role": "assistant", "content": "ok"}
    call = ModelCall(
        "s",
        [
            {"role": "user", "content": "one", "images": ["files/a.jpg", "files/b.jpg"]},
            plain,
            {"role": "user", "content": "two", "images": ["files/c.jpg"]},
        ],
    )
    out = with_images(call, groups, "fam", FakeCache(), vision=True, model="m")
    assert out is not call and out.system == "s"
    assert out.messages[1] is plain
    assert out.messages[0] == {
        "role": "user",
        "content": "one",
        "image_data": [
            {"media_type": "image/x-a", "base64": _b64("Ja")},
            {"media_type": "image/x-b", "base64": _b64("Jb")},
        ],
    }
    assert out.messages[2] == {
        "role": "user",
        "content": "two",
        "image_data": [{"media_type": "image/x-c", "base64": _b64("Jc")}],
    }
    assert call.messages[0]["images"] == ["files/a.jpg", "files/b.jpg"]  # not changed


def test_only_the_newest_images_up_to_the_limit_are_shown(groups: Path) -> None:
    call = ModelCall(
        "s",
        [
            {"role": "user", "content": "one", "images": ["files/a.jpg"]},
            {"role": "user", "content": "two", "images": ["files/b.jpg", "files/c.jpg"]},
        ],
    )
    first, second = _shown(call, groups, limit=2)
    assert first == {
        "role": "user",
        "content": "one\n[image files/a.jpg, 1 B: not shown again (at most 2 images go with "
        "one request: the newest)]",
    }
    assert second["image_data"] == [
        {"media_type": "image/x-b", "base64": _b64("Jb")},
        {"media_type": "image/x-c", "base64": _b64("Jc")},
    ]
    assert "content" in second and second["content"] == "two"
    one, two = _shown(call, groups, limit=1)
    assert "image_data" not in one
    assert two["content"] == (
        "two\n[image files/b.jpg, 1 B: not shown again (at most 1 images go with one request: "
        "the newest)]"
    )
    assert two["image_data"] == [{"media_type": "image/x-c", "base64": _b64("Jc")}]


def test_the_default_limit_is_the_bound_of_images_per_request(groups: Path) -> None:
    paths = ["files/a.jpg"] * (IMAGES_PER_REQUEST_MAX + 1)
    (message,) = _shown(ModelCall("s", [{"role": "user", "content": "", "images": paths}]), groups)
    assert len(message["image_data"]) == IMAGES_PER_REQUEST_MAX
    assert message["content"] == (
        f"[image files/a.jpg, 1 B: not shown again (at most {IMAGES_PER_REQUEST_MAX} images go "
        "with one request: the newest)]"
    )


def test_a_refused_image_is_a_line_and_does_not_count_against_the_limit(
    groups: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="orchestrator.relay")
    call = ModelCall(
        "s", [{"role": "user", "content": "x", "images": ["files/a.jpg", "files/bad1.jpg"]}]
    )
    (message,) = _shown(call, groups, limit=1)
    assert message == {
        "role": "user",
        "content": "x\n[image files/bad1.jpg, 4 B: not shown: refused bad1]",
        "image_data": [{"media_type": "image/x-a", "base64": _b64("Ja")}],
    }
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.relay"] == [
        "group fam: image files/bad1.jpg not shown: refused bad1"
    ]


def test_a_model_without_vision_gets_a_line_for_each_image(groups: Path) -> None:
    call = ModelCall(
        "s", [{"role": "user", "content": "x", "images": ["files/a.jpg", "files/b.jpg"]}]
    )
    cache = FakeCache()
    (message,) = with_images(call, groups, "fam", cache, vision=False, model="m-9").messages
    assert message == {
        "role": "user",
        "content": "x\n[image files/a.jpg, 1 B: not shown: m-9 does not take images]\n"
        "[image files/b.jpg, 1 B: not shown: m-9 does not take images]",
    }
    assert cache.seen == []


def test_lines_go_after_text_alone_or_without_a_blank_line(groups: Path) -> None:
    line = "[image files/a.jpg, 1 B: not shown: m does not take images]"
    for content, expected in [
        ("", line),
        (None, line),
        ([{"type": "text", "text": "t"}], line),
        ("t", "t\n" + line),
    ]:
        call = ModelCall("s", [{"role": "user", "content": content, "images": ["files/a.jpg"]}])
        (message,) = _shown(call, groups, vision=False, model="m")
        assert message == {"role": "user", "content": expected}
    call = ModelCall("s", [{"role": "user", "images": ["files/a.jpg"]}])
    assert _shown(call, groups, vision=False, model="m") == [{"role": "user", "content": line}]


def test_a_path_outside_files_a_missing_file_and_a_link_are_named(groups: Path) -> None:
    folder = groups / "fam"
    (folder / "notes.jpg").write_bytes(b"a")
    os.symlink("a.jpg", folder / "files" / "link.jpg")
    paths = ["notes.jpg", "files/gone.jpg", "files/link.jpg", "files/../notes.jpg"]
    call = ModelCall("s", [{"role": "user", "content": "x", "images": paths}])
    (message,) = _shown(call, groups)
    assert message["content"].split("\n") == [
        "x",
        "[image notes.jpg: not shown: only files under files/ are shown]",
        "[image files/gone.jpg: not shown: no such file]",
        "[image files/link.jpg, 5 B: not shown: is a symlink, not a regular file]",
        "[image files/../notes.jpg: not shown: '..' is not allowed]",
    ]
    assert "image_data" not in message


def test_a_file_over_the_source_bound_is_not_read(groups: Path) -> None:
    big = groups / "fam" / "files" / "big.jpg"
    with big.open("wb") as f:
        f.truncate(IMAGE_SOURCE_MAX_BYTES + 1)
    edge = groups / "fam" / "files" / "edge.jpg"
    with edge.open("wb") as f:
        f.truncate(IMAGE_SOURCE_MAX_BYTES)
    call = ModelCall(
        "s", [{"role": "user", "content": "", "images": ["files/big.jpg", "files/edge.jpg"]}]
    )
    cache = FakeCache()
    (message,) = with_images(call, groups, "fam", cache, vision=True, model="m").messages
    assert message["content"] == (
        "[image files/big.jpg, 20.0 MiB: not shown: it is over the 20.0 MiB an image may be]"
    )
    assert len(cache.seen) == 1 and len(cache.seen[0]) == IMAGE_SOURCE_MAX_BYTES


def test_a_file_that_cannot_be_read_says_why(groups: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.confined import ConfinedDir

    errors = iter([OSError(5, "Input/output error"), OSError("boom")])

    def failing(self: Any, relative: str, limit: int, *, truncate: bool = False) -> bytes:
        assert limit == IMAGE_SOURCE_MAX_BYTES
        raise next(errors)

    monkeypatch.setattr(ConfinedDir, "read_bytes", failing)
    call = ModelCall(
        "s", [{"role": "user", "content": "x", "images": ["files/b.jpg", "files/a.jpg"]}]
    )
    (message,) = _shown(call, groups)
    assert message == {
        "role": "user",
        "content": "x\n[image files/b.jpg, 1 B: not shown: it could not be read (boom)]\n"
        "[image files/a.jpg, 1 B: not shown: it could not be read (Input/output error)]",
    }


# applying an approved MCP server request


def _request(content: dict[str, Any], group: str = "fam", id_: int = 7) -> Any:
    from orchestrator.store.held import HeldRequest

    return HeldRequest(
        id_, group, "mcp-server", json.dumps(content), "0" * 64, "cli", "c", None, "alice",
        "m1", True, 0, 1e12,
    )  # fmt: skip


@pytest.fixture
def fam(tmp_path: Path) -> Any:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home

    return GroupStore(Home(tmp_path)).add(GroupConfig(name="fam"))


ASKED = {
    "server": "time",
    "command": "mcp-server-time",
    "args": ["--local-timezone", "UTC"],
    "asked by": "alice",
    "reason": "to tell the time",
}


def test_an_approved_request_adds_the_server_as_shown_with_no_tool_approved(
    tmp_path: Path, fam: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.groups.config import load_group_config
    from orchestrator.relay.mcp_requests import apply_held

    caplog.set_level("INFO", logger="orchestrator.mcp")
    done = apply_held(tmp_path / "groups", "fam", _request(ASKED), "bob")
    assert done == (True, "MCP server 'time' is in group.yaml; its tools are being listed")
    (server,) = load_group_config(fam.config_file).mcp.servers
    assert (server.name, server.command, server.args, server.pins) == (
        "time", "mcp-server-time", ("--local-timezone", "UTC"), {},
    )  # fmt: skip
    text = fam.config_file.read_text()
    assert "asked by" not in text and "reason" not in text and "to tell" not in text
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.mcp"] == [
        "group fam: MCP server request 7 (time) approved by 'bob'"
    ]
    again = apply_held(tmp_path / "groups", "fam", _request(ASKED), "bob")
    assert again == (False, "the group has an MCP server 'time' already")


def test_a_request_whose_definition_is_invalid_is_not_applied(tmp_path: Path, fam: Any) -> None:
    from orchestrator.groups.config import load_group_config
    from orchestrator.relay.mcp_requests import apply_held

    before = fam.config_file.read_text()
    bad = {"server": "t", "command": "x", "env": {"PATH": "/evil"}, "reason": "r"}
    done, why = apply_held(tmp_path / "groups", "fam", _request(bad), "bob")
    assert not done and "env.PATH: is set by the orch" in why
    assert fam.config_file.read_text() == before
    assert load_group_config(fam.config_file).mcp.get("t") is None


def test_after_approval_the_pins_are_told_to_the_requests_chat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.relay.approvals as approvals
    import orchestrator.relay.mcp_requests as mcp_requests

    told: list[Any] = []

    def tell_after(queue: Any, request: Any, work: Any, *, background: bool, name: str) -> Any:
        told.append((queue, request, work(), background, name))
        return "thread"

    monkeypatch.setattr(approvals, "tell_after", tell_after)
    monkeypatch.setattr(mcp_requests, "_pin", lambda groups, request: f"pinned {groups}")
    request = _request(ASKED)
    queue: Any = object()
    assert mcp_requests.pin_after_approval(queue, tmp_path, request) == "thread"
    assert mcp_requests.pin_after_approval(queue, tmp_path, request, background=False) == "thread"
    assert told == [
        (queue, request, f"pinned {tmp_path}", True, "mcp"),
        (queue, request, f"pinned {tmp_path}", False, "mcp"),
    ]


class FakeClient:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def probe(tmp_path: Path, fam: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """_pin with no engine: the client, backend, runtime and listing are recorded fakes."""
    import orchestrator.image.agent as agent
    import orchestrator.image.group as image_group
    import orchestrator.runtime as runtime_pkg
    import orchestrator.runtime.engine as engine
    import orchestrator.runtime.lifecycle as lifecycle
    import orchestrator.runtime.mcp_probe as mcp_probe
    from orchestrator.groups.config import config_lock, set_mcp_server
    from orchestrator.mcp.tools import ListedTool

    with config_lock(fam.config_file):
        set_mcp_server(fam.config_file, "time", {"command": "mcp-server-time", "tools": {}})
    state: dict[str, Any] = {"client": FakeClient(), "runtimes": [], "listed": []}
    schema = {"type": "object", "properties": {}}
    state["tools"] = [
        ListedTool("zeta", "Z.", schema),
        ListedTool("alpha", "A.", schema),
        ListedTool("broken", "B.", {"type": "string"}),
    ]

    class FakeRuntime:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs
            state["runtimes"].append(self)

    def list_tools(runtime: Any, group: Any, server: Any) -> tuple[list[Any], int]:
        state["listed"].append((runtime, group.path.name, server.name, server.command))
        if "during" in state:
            state["during"]()
        if "fail" in state:
            raise state["fail"]
        return state["tools"], 0

    def connect() -> Any:
        if "connect_fail" in state:
            raise state["connect_fail"]
        return state["client"]

    monkeypatch.setattr(engine, "connect", connect)
    monkeypatch.setattr(
        runtime_pkg, "open_backend", lambda c, client, home: ("backend", c.project, client, home)
    )
    monkeypatch.setattr(agent, "agent_image_ref", lambda client, image: ("ref", client, image))
    monkeypatch.setattr(
        image_group, "GroupImages", lambda client, project: ("images", client, project())
    )
    monkeypatch.setattr(lifecycle, "GroupRuntime", FakeRuntime)
    monkeypatch.setattr(lifecycle, "default_skills_root", lambda: Path("/skills"))
    monkeypatch.setattr(mcp_probe, "list_stdio_tools", list_tools)
    state["groups"] = tmp_path / "groups"
    state["fam"] = fam
    return state


def _pins(fam: Any) -> dict[str, str] | None:
    from orchestrator.groups.config import load_group_config

    server = load_group_config(fam.config_file).mcp.get("time")
    return None if server is None else dict(server.pins)


def test_the_listed_tools_fit_for_a_model_are_pinned_and_named(probe: dict[str, Any]) -> None:
    from orchestrator.config import load_config
    from orchestrator.home import Home
    from orchestrator.relay.mcp_requests import _pin

    said = _pin(probe["groups"], _request({"server": "time"}))
    zeta, alpha, _ = probe["tools"]
    assert said == (
        "MCP server 'time' is added with 2 tools approved (alpha, zeta); they are offered once "
        "the group's container is made again, between turns, within a minute"
    )
    assert _pins(probe["fam"]) == {"zeta": zeta.digest, "alpha": alpha.digest}
    assert probe["client"].closed == 1
    (runtime,) = probe["runtimes"]
    home, config, backend, image_ref = runtime.args
    assert isinstance(home, Home) and home.root == probe["groups"].parent
    assert config.project == load_config(home).project
    assert backend == ("backend", config.project, probe["client"], home)
    assert image_ref() == ("ref", probe["client"], config.image)
    assert runtime.kwargs == {
        "skills_root": Path("/skills"),
        "group_image": ("images", probe["client"], config.project),
    }
    assert probe["listed"] == [(runtime, "fam", "time", "mcp-server-time")]


def test_a_server_with_no_fit_tool_is_added_with_none_approved(probe: dict[str, Any]) -> None:
    from orchestrator.relay.mcp_requests import _pin

    probe["tools"] = probe["tools"][2:]
    said = _pin(probe["groups"], _request({"server": "time"}))
    assert said.startswith("MCP server 'time' is added with 0 tools approved (none); they ")
    assert _pins(probe["fam"]) == {}


def test_a_server_gone_before_or_during_the_listing_gets_nothing(probe: dict[str, Any]) -> None:
    from orchestrator.groups.config import config_lock, set_mcp_server
    from orchestrator.relay.mcp_requests import _pin

    said = _pin(probe["groups"], _request({"server": "other"}))
    assert said == "MCP server 'other' is no longer in group.yaml; nothing was approved"
    assert probe["listed"] == [] and probe["client"].closed == 1

    def remove() -> None:
        with config_lock(probe["fam"].config_file):
            set_mcp_server(probe["fam"].config_file, "time", None)

    probe["during"] = remove
    said = _pin(probe["groups"], _request({"server": "time"}))
    assert said == "MCP server 'time' was removed meanwhile; nothing was approved"
    assert _pins(probe["fam"]) is None


def test_a_listing_that_fails_says_why_and_how_to_approve_later(
    probe: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.errors import OrchestratorError
    from orchestrator.relay.mcp_requests import _pin

    caplog.set_level("INFO", logger="orchestrator.mcp")
    probe["fail"] = OrchestratorError("the probe failed")
    said = _pin(probe["groups"], _request({"server": "time"}))
    assert said == (
        "MCP server 'time' was added but could not be listed: the probe failed. None of its "
        "tools is offered until the operator runs: orchestrator mcp approve time --group fam"
    )
    assert probe["client"].closed == 1 and _pins(probe["fam"]) == {}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "group fam: MCP server time could not be listed: the probe failed")
    ]
    caplog.clear()
    probe["fail"] = ValueError("odd")
    said = _pin(probe["groups"], _request({"server": "time"}))
    assert said == "MCP server 'time' was added but could not be listed: odd"
    assert probe["client"].closed == 2 and _pins(probe["fam"]) == {}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "group fam: MCP server time could not be listed")
    ]
    probe["connect_fail"] = OrchestratorError("no engine")
    said = _pin(probe["groups"], _request({"server": "time"}))
    assert said.startswith("MCP server 'time' was added but could not be listed: no engine. ")


# the link, over a fake SDK client


class Page:
    def __init__(self, tools: list[Any], next_cursor: str | None = None, camel: bool = False):
        self.tools = tools
        if camel:
            self.nextCursor = next_cursor
        else:
            self.next_cursor = next_cursor


class SdkTool:
    def __init__(self, name: str) -> None:
        self.name = name
        self.description = f"Tool {name}."
        self.input_schema = {"type": "object"}


class FakeServer:
    """What link._connect returns: an async context manager whose client lists ``pages``
    (by cursor) and answers calls; ``fail_enter`` fails its start, ``hang_enter`` makes it
    take that many seconds; ``crash_on_exit`` is what its end raises."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.world = world

    async def __aenter__(self) -> FakeServer:
        import asyncio

        self.world["entered"] += 1
        if self.world.get("hang_enter"):  # seconds: it starts, but too late
            await asyncio.sleep(self.world["hang_enter"])
        fail = self.world.get("fail_enter")
        if fail is not None:
            self.world["refusals"].extend(self.world.get("statuses", []))
            raise fail
        return self

    async def __aexit__(self, *exc: Any) -> None:
        import asyncio

        self.world.setdefault("exits", []).append(exc[0])  # how its holder left it
        if self.world.pop("hang_exit", False):  # it does not stop when asked
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.world["exit_cancelled"] = True
                raise
        self.world["exited"] += 1
        crash = self.world.pop("crash_on_exit", None)
        if crash is not None:
            raise crash

    async def list_tools(self, cursor: str | None = None) -> Page:
        import asyncio

        self.world["cursors"].append(cursor)
        if self.world.get("hang_list"):
            await asyncio.sleep(3600)
        if self.world.get("fail_list"):
            raise RuntimeError("listing\n  broke")
        pages: dict[str | None, Page] = self.world["pages"]
        return pages[cursor]

    async def call_tool(self, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        self.world["calls"].append((tool, arguments, kw))
        if tool == "fail":
            raise ExceptionGroup("group", [ValueError("inner  problem")])
        if tool == "hang":  # it never answers, whatever read timeout it was given
            import asyncio

            await asyncio.sleep(3600)
        return {"called": tool, **arguments}


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import orchestrator.mcp.link as link

    state: dict[str, Any] = {
        "entered": 0, "exited": 0, "cursors": [], "calls": [], "targets": [],
        "pages": {None: Page([SdkTool("a"), SdkTool("b")])},
    }  # fmt: skip

    def connect(target: Any, refusals: list[int]) -> FakeServer:
        state["targets"].append(target)
        state["refusals"] = refusals
        return FakeServer(state)

    monkeypatch.setattr(link, "_connect", connect)
    return state


@pytest.fixture
def a_link() -> Any:
    from orchestrator.mcp.link import Link, Stdio

    link = Link("tracker", Stdio("srv", ("--a", "b")))
    yield link
    link.close()


def test_targets_describe_themselves() -> None:
    from orchestrator.mcp.link import Remote, Stdio

    assert Stdio("srv", ("--a", "b")).describe() == "srv --a b"
    assert Stdio("srv").describe() == "srv"
    assert Remote("http://h/mcp").describe() == "http http://h/mcp"
    assert Remote("http://h/sse", {"A": "secret"}, "sse").describe() == "sse http://h/sse"
    assert "secret" not in repr(Remote("http://h/sse", {"A": "secret"}, "sse"))


def test_a_link_starts_on_first_use_lists_once_and_calls(world: dict[str, Any], a_link: Any):
    assert a_link.state == "not started" and a_link.starts == 0 and a_link.cut_tools == 0
    tools = a_link.tools()
    assert [(t.name, t.description) for t in tools] == [("a", "Tool a."), ("b", "Tool b.")]
    assert a_link.state == "running" and a_link.starts == 1 and a_link.cut_tools == 0
    assert a_link.tools() is tools and world["cursors"] == [None]
    assert world["targets"] == [a_link.target]
    assert a_link.call("find", {"q": 1}, timeout=9) == {"called": "find", "q": 1}
    assert world["calls"] == [("find", {"q": 1}, {"read_timeout_seconds": 9})]
    assert a_link.call("find", {}) == {"called": "find"}
    assert world["calls"][-1][2] == {"read_timeout_seconds": 60}
    # a short read timeout still leaves the call its answer (the host waits 5 s more)
    assert a_link.call("find", {}, timeout=1) == {"called": "find"}
    assert world["entered"] == 1 and a_link.starts == 1 and a_link.last_error is None
    loop, thread = a_link._loop, a_link._thread
    assert thread.name == "mcp-tracker" and thread.daemon and thread.is_alive()
    a_link.close()
    assert loop.is_closed() and not thread.is_alive()
    assert world["exited"] == 1 and a_link._loop is None and a_link._thread is None
    assert a_link.state == "not started"


def test_a_listing_over_pages_follows_either_cursor_spelling(world: dict[str, Any], a_link: Any):
    world["pages"] = {
        None: Page([SdkTool("a")], "p2"),
        "p2": Page([SdkTool("b")], "p3", camel=True),
        "p3": Page([SdkTool("c")], ""),
    }
    assert [t.name for t in a_link.tools()] == ["a", "b", "c"]
    assert world["cursors"] == [None, "p2", "p3"]


def test_a_listing_stops_past_the_bound_and_is_cut_to_it(
    world: dict[str, Any], a_link: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="orchestrator.mcp.link")
    from orchestrator.limits import MCP_TOOLS_MAX

    half = MCP_TOOLS_MAX // 2
    world["pages"] = {
        None: Page([SdkTool(f"a{i}") for i in range(half)], "p2"),
        "p2": Page([SdkTool(f"b{i}") for i in range(half)], "p3"),
        "p3": Page([SdkTool("c0"), SdkTool("c1"), SdkTool("c2")], "p4"),
        "p4": Page([SdkTool("d0")], None),
    }
    tools = a_link.tools()
    assert world["cursors"] == [None, "p2", "p3"]
    assert len(tools) == MCP_TOOLS_MAX and tools[-1].name == f"b{half - 1}"
    assert a_link.cut_tools == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"mcp server tracker lists {MCP_TOOLS_MAX + 3} tools; only the first {MCP_TOOLS_MAX} "
        "are considered"
    ]


def test_a_listing_of_exactly_the_bound_goes_on_and_is_not_cut(world: dict[str, Any], a_link):
    from orchestrator.limits import MCP_TOOLS_MAX

    world["pages"] = {
        None: Page([SdkTool(f"a{i}") for i in range(MCP_TOOLS_MAX)], "p2"),
        "p2": Page([], None),
    }
    assert len(a_link.tools()) == MCP_TOOLS_MAX and a_link.cut_tools == 0
    assert world["cursors"] == [None, "p2"]


def test_a_listing_follows_at_most_64_pages(world: dict[str, Any], a_link: Any) -> None:
    world["pages"] = {None: Page([], "c1")} | {f"c{i}": Page([], f"c{i + 1}") for i in range(1, 80)}
    assert a_link.tools() == []
    assert len(world["cursors"]) == 64 and world["cursors"][-1] == "c63"


def test_a_server_that_cannot_start_says_why_and_is_started_again_until_the_bound(
    world: dict[str, Any], a_link: Any
) -> None:
    from orchestrator.limits import MCP_RESTARTS_MAX
    from orchestrator.mcp.link import LinkFailed

    world["fail_enter"] = OSError("no  such\ncommand")
    for start in range(1, MCP_RESTARTS_MAX + 2):
        with pytest.raises(LinkFailed) as failed:
            a_link.tools()
        assert str(failed.value) == (
            "MCP server 'tracker' (srv --a b) could not start: OSError: no such command"
        )
        assert a_link.starts == start
        assert a_link.state == ("failed" if start > MCP_RESTARTS_MAX else "stopped")
    assert world["entered"] == MCP_RESTARTS_MAX + 1
    with pytest.raises(LinkFailed) as failed:
        a_link.call("find", {})
    assert str(failed.value) == (
        f"MCP server 'tracker' failed {MCP_RESTARTS_MAX + 1} times and is not started again "
        "until its container is (last error: OSError: no such command)"
    )
    assert world["entered"] == MCP_RESTARTS_MAX + 1 and world["calls"] == []


def test_a_remote_refusal_names_its_status_and_bad_credentials_say_where(
    world: dict[str, Any],
) -> None:
    from orchestrator.mcp.link import Link, LinkFailed, Remote

    link = Link("tracker", Remote("http://h/mcp"))
    try:
        world["fail_enter"] = RuntimeError("")
        for statuses, said in [
            ([], ""),
            ([500, 401], " (HTTP 401: the server refused the credentials; check the headers of "
             "mcp_servers.tracker in orchestrator.yaml)"),
            ([403], " (HTTP 403: the server refused the credentials; check the headers of "
             "mcp_servers.tracker in orchestrator.yaml)"),
            ([401, 502], " (HTTP 502)"),
        ]:  # fmt: skip
            world["statuses"] = statuses
            with pytest.raises(LinkFailed) as failed:
                link.tools()
            assert str(failed.value) == (
                f"MCP server 'tracker' (http http://h/mcp) could not start: RuntimeError{said}"
            )
            assert link.refusals == []
    finally:
        link.close()


def test_a_failed_listing_stops_the_server_and_the_next_use_starts_it_again(
    world: dict[str, Any], a_link: Any
) -> None:
    from orchestrator.mcp.link import LinkFailed

    world["fail_list"] = True
    with pytest.raises(LinkFailed) as failed:
        a_link.tools()
    assert str(failed.value) == (
        "MCP server 'tracker' could not list its tools: RuntimeError: listing broke"
    )
    assert a_link.last_error == "RuntimeError: listing broke"
    assert a_link.state == "stopped" and world["exited"] == 1
    world["fail_list"] = False
    assert [t.name for t in a_link.tools()] == ["a", "b"]
    assert a_link.starts == 2 and a_link.state == "running"


def test_a_listing_or_start_that_takes_too_long_is_stopped(world: dict[str, Any], a_link: Any):
    from orchestrator.mcp.link import LinkFailed

    world["hang_list"] = True
    with pytest.raises(LinkFailed) as failed:
        a_link.tools(timeout=0.4)
    assert str(failed.value) == "MCP server 'tracker': its tool listing took over 0 s"
    assert a_link.last_error == "its tool listing took over 0 s"
    assert a_link.state == "stopped" and world["exited"] == 1
    world["hang_list"] = False
    world["hang_enter"] = 2.0
    with pytest.raises(LinkFailed) as failed:
        a_link.tools(timeout=0.6)
    assert str(failed.value) == "MCP server 'tracker': it did not start within 1 s"
    assert a_link.state == "stopped" and a_link.starts == 2
    world["hang_enter"] = 0
    assert len(a_link.tools()) == 2 and a_link.starts == 3


def test_a_call_whose_server_start_hangs_waits_the_listing_bound_not_forever(
    world: dict[str, Any], a_link: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.mcp.link as link
    from orchestrator.mcp.link import LinkFailed

    monkeypatch.setattr(link, "MCP_LIST_TIMEOUT_SECONDS", 0.6)
    world["hang_enter"] = 2.0  # it would start, but after the bound
    with pytest.raises(LinkFailed) as failed:
        a_link.call("find", {}, timeout=9)
    assert str(failed.value) == "MCP server 'tracker': it did not start within 1 s"
    assert a_link.state == "stopped" and a_link.starts == 1 and world["calls"] == []


def test_a_failed_call_says_why_and_the_next_call_gets_a_fresh_server(
    world: dict[str, Any], a_link: Any
) -> None:
    from orchestrator.mcp.link import LinkFailed

    a_link.tools()
    with pytest.raises(LinkFailed) as failed:
        a_link.call("fail", {"x": 1})
    assert str(failed.value) == "MCP server 'tracker': fail failed: ValueError: inner problem"
    assert a_link.last_error == "fail failed: ValueError: inner problem"
    assert a_link.state == "stopped" and world["exited"] == 1
    assert a_link.call("find", {}) == {"called": "find"}
    assert a_link.starts == 2 and world["entered"] == 2


def test_a_call_that_never_answers_fails_5_s_past_its_timeout_and_stops_the_server(
    world: dict[str, Any], a_link: Any
) -> None:
    from orchestrator.mcp.link import LinkFailed

    a_link.tools()
    with pytest.raises(LinkFailed) as failed:
        a_link.call("hang", {}, timeout=0)
    assert str(failed.value) == "MCP server 'tracker': hang did not answer within 0 s"
    assert a_link.last_error == "hang did not answer within 0 s"
    # the server was asked to stop and left cleanly, not cancelled
    assert a_link.state == "stopped" and world["exits"] == [None] and world["exited"] == 1


def test_a_server_that_does_not_stop_when_asked_is_cancelled(
    world: dict[str, Any], a_link: Any
) -> None:
    from orchestrator.mcp.link import LinkFailed

    a_link.tools()
    world["hang_exit"] = True
    with pytest.raises(LinkFailed):
        a_link.call("fail", {})
    assert world.get("exit_cancelled") is True and world["exited"] == 0
    assert (
        a_link.state == "stopped" and a_link.last_error == "fail failed: ValueError: inner problem"
    )
    assert a_link.call("find", {}) == {"called": "find"} and a_link.starts == 2


def test_a_server_that_ends_on_its_own_is_noted_and_started_on_next_use(
    world: dict[str, Any], a_link: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    caplog.set_level("INFO", logger="orchestrator.mcp.link")
    a_link.tools()
    world["crash_on_exit"] = ConnectionError("pipe  closed")
    stop = a_link._stop
    assert stop is not None and a_link._loop is not None
    asyncio.run_coroutine_threadsafe(_set(stop), a_link._loop).result(5)
    holder = a_link._holder
    assert holder is not None
    asyncio.run_coroutine_threadsafe(asyncio.wait([holder]), a_link._loop).result(5)
    assert a_link.last_error == "ConnectionError: pipe closed"
    assert a_link.state == "stopped"
    assert a_link.call("find", {}) == {"called": "find"}
    assert a_link.starts == 2 and a_link.state == "running"
    assert [r.getMessage() for r in caplog.records] == [
        "mcp server tracker ended: ConnectionError: pipe closed",
        "mcp server tracker started again (start 2)",
    ]


async def _set(event: Any) -> None:
    event.set()


def test_why_is_one_line_of_the_first_inner_exception() -> None:
    from orchestrator.mcp.link import _why

    assert _why(ValueError("a\n  b\tc ")) == "ValueError: a b c"
    assert _why(ValueError()) == "ValueError"
    assert _why(ValueError("x" * 400)) == "ValueError: " + "x" * 300
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [KeyError("k")]), OSError()])
    assert _why(nested) == "KeyError: 'k'"


def test_a_tool_is_judged_by_the_name_it_makes_with_its_own_server(
    probe: dict[str, Any],
) -> None:
    from orchestrator.groups.config import config_lock, set_mcp_server
    from orchestrator.mcp.tools import PREFIX, ListedTool
    from orchestrator.relay.mcp_requests import _pin

    with config_lock(probe["fam"].config_file):
        set_mcp_server(probe["fam"].config_file, "clock", {"command": "c", "tools": {}})
    schema = {"type": "object"}
    fits = "f" * (64 - len(PREFIX) - len("clock__"))
    probe["tools"] = [ListedTool(fits, "", schema), ListedTool(fits + "x", "", schema)]
    said = _pin(probe["groups"], _request({"server": "clock"}))
    assert said.startswith(f"MCP server 'clock' is added with 1 tools approved ({fits}); ")

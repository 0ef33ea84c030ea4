"""Exact behaviour of small parts the turn goes through: chat commands the host answers
itself, the relay provider's request and its answer read back, the provider interface's
wire form, the host's remote MCP sessions, and the console script's dispatch."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import entry
from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.providers.base import (
    FLUSH,
    SUMMARY,
    TURN,
    BudgetExhausted,
    Completion,
    CompletionRequest,
    ContextOverflow,
    ProviderError,
    ToolCall,
    TurnWaits,
)
from orchestrator.agent.providers.relay import RelayProvider, completion_from_wire
from orchestrator.agent.tools import ToolSpec
from orchestrator.commands import APPROVE, CONFIRM, Command, parse_command
from orchestrator.config.mcp import HeaderDef, RemoteServerDef
from orchestrator.relay.mcp_remote import RemoteLinks
from orchestrator.secrets import MissingSecret, SecretRef

# --- chat commands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/confirm", Command(CONFIRM, ())),
        ("/CONFIRM", Command("confirm", ())),
        ("/approve 12", Command(APPROVE, ("12",))),
        ("/approve@helperbot 12", Command("approve", ("12",))),
        ("@helperbot /confirm", Command("confirm", ())),
        ("@helperbot, /confirm", Command("confirm", ())),
        ("@helperbot: @other /confirm", Command("confirm", ())),
        ("/confirm @helperbot", Command("confirm", ())),
        ("/confirm @a @b", Command("confirm", ())),
        ("  /approve   7  \n", Command("approve", ("7",))),
        ("/a", Command("a", ())),
        ("/" + "a" * 32, Command("a" * 32, ())),
        ("/a_1", Command("a_1", ())),
        ("/a@" + "b" * 64, Command("a", ())),
        ("/a@b.c-d_e", Command("a", ())),
        ("/x " + " ".join("12345678"), Command("x", tuple("12345678"))),
        ("@" + "m" * 255 + " /x", Command("x", ())),
        ("/x @only", Command("x", ())),
    ],
)
def test_a_command_is_recognised_with_the_mentions_around_it(text: str, command: Command) -> None:
    assert parse_command(text) == command


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "@bot",
        "@bot @other",
        "please /confirm",
        "/confirm@",
        "/" + "a" * 33,
        "/1abc",
        "/_a",
        "/a-b",
        "confirm",
        "//confirm",
        "/a@" + "b" * 65,
        "/a@b/c",
        "/x " + " ".join("123456789"),  # nine arguments: past the cap
        "@" + "m" * 256 + " /x",  # not a mention: a word that is no command
        "@a@b /x",
        "/ confirm",
    ],
)
def test_what_is_not_a_command(text: str) -> None:
    assert parse_command(text) is None


def test_a_mention_last_is_dropped_but_never_the_command_itself() -> None:
    assert parse_command("@bot /x @bot") == Command("x", ())
    assert parse_command("/x @bot,") == Command("x", ())
    assert parse_command("/x a @bot:") == Command("x", ("a",))


# --- the provider interface's wire form -------------------------------------------------


def test_a_requests_wire_form_has_every_field() -> None:
    spec = ToolSpec("read", "Read a file.", {"type": "object"})
    request = CompletionRequest(
        "sys", [{"role": "user", "content": "hi"}], (spec,), FLUSH, 300, True
    )
    assert request.to_wire() == {
        "system": "sys",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"name": "read", "description": "Read a file.", "parameters": {"type": "object"}}
        ],
        "purpose": "flush",
        "max_tokens": 300,
        "show": True,
    }
    bare = CompletionRequest("s", [])
    assert bare.to_wire() == {
        "system": "s",
        "messages": [],
        "tools": [],
        "purpose": "turn",
        "max_tokens": None,
        "show": False,
    }
    assert (TURN, FLUSH, SUMMARY) == ("turn", "flush", "summary")


def test_a_completions_defaults() -> None:
    assert Completion("t") == Completion("t", (), None, None, False)


def test_the_errors_a_provider_raises_are_provider_errors() -> None:
    for kind in (BudgetExhausted, TurnWaits, ContextOverflow):
        assert issubclass(kind, ProviderError)


# --- the relay provider -------------------------------------------------------------------


class Host:
    def __init__(self, answer: dict[str, Any] | None = None, fail: dict[str, Any] | None = None):
        self.answer = answer or {"text": "ok"}
        self.fail = fail
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.asked.append((kind, fields))
        if self.fail is not None:
            raise HostRequestFailed("the host refused", self.fail)
        return self.answer


def test_the_relay_asks_the_host_for_model_complete_with_the_request() -> None:
    host = Host({"text": "hello", "usage": {"input_tokens": 12}, "stop_reason": "end"})
    request = CompletionRequest("sys", [{"role": "user", "content": "hi"}], purpose=SUMMARY)
    completion = RelayProvider("m").complete(request, host)  # type: ignore[arg-type]
    assert host.asked == [("model.complete", request.to_wire())]
    assert completion == Completion("hello", (), 12, "end", False)
    assert RelayProvider.name == "relay" and RelayProvider("m").model == "m"


def test_without_the_host_the_relay_cannot_answer() -> None:
    with pytest.raises(ProviderError) as caught:
        RelayProvider("m").complete(CompletionRequest("s", []))
    assert type(caught.value) is ProviderError
    assert str(caught.value) == (
        "this group's model runs on the host: turns must come through the daemon"
    )


@pytest.mark.parametrize(
    ("answer", "kind", "text"),
    [
        ({"budget": True, "error": "the day's budget is used"}, BudgetExhausted,
         "the day's budget is used"),
        ({"budget": True}, BudgetExhausted, "the host refused"),
        ({"budget": True, "error": ""}, BudgetExhausted, "the host refused"),
        ({"wait": True, "error": "paused until midnight"}, TurnWaits, "paused until midnight"),
        ({"wait": True}, TurnWaits, "the host refused"),
        ({"overflow": True, "error": "too long"}, ContextOverflow, "the host refused"),
        ({"error": "boom"}, ProviderError, "the host refused"),
        ({"budget": False, "wait": 0, "overflow": None}, ProviderError, "the host refused"),
        ({"budget": True, "wait": True}, BudgetExhausted, "the host refused"),
        ({"wait": True, "overflow": True}, TurnWaits, "the host refused"),
    ],
)  # fmt: skip
def test_a_refusal_becomes_the_error_it_names(
    answer: dict[str, Any], kind: type[ProviderError], text: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        RelayProvider("m").complete(CompletionRequest("s", []), Host(fail=answer))  # type: ignore[arg-type]
    assert type(caught.value) is kind
    assert str(caught.value) == text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_answer_with_tool_calls_is_read_back() -> None:
    answer = {
        "text": None,
        "tool_calls": [
            {"id": "c1", "name": "read", "arguments": {"path": "a"}},
            {"id": "c2", "name": "list", "arguments": {}},
        ],
        "usage": {"input_tokens": 0},
        "stop_reason": "tool_calls",
        "shown": True,
    }
    assert completion_from_wire(answer) == Completion(
        None,
        (ToolCall("c1", "read", {"path": "a"}), ToolCall("c2", "list", {})),
        0,
        "tool_calls",
        True,
    )


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ({}, Completion(None)),
        ({"text": ""}, Completion("")),
        ({"tool_calls": None}, Completion(None)),
        ({"usage": {"input_tokens": True}}, Completion(None)),
        ({"usage": {"input_tokens": 3.0}}, Completion(None)),
        ({"usage": {"input_tokens": "3"}}, Completion(None)),
        ({"usage": [3]}, Completion(None)),
        ({"usage": None}, Completion(None)),
        ({"stop_reason": 1}, Completion(None)),
        ({"shown": 1}, Completion(None)),
        ({"shown": "true"}, Completion(None)),
    ],
)
def test_odd_fields_of_an_answer_read_as_unknown(answer: dict[str, Any], read: Completion) -> None:
    assert completion_from_wire(answer) == read


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"text": 1}, "the host's completion is malformed"),
        ({"text": b"x"}, "the host's completion is malformed"),
        ({"tool_calls": {"id": "c"}}, "the host's completion is malformed"),
        ({"tool_calls": "c"}, "the host's completion is malformed"),
        ({"tool_calls": ["c"]}, "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"name": "n", "arguments": {}}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": 1, "name": "n", "arguments": {}}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": "c", "arguments": {}}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": "c", "name": None, "arguments": {}}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": "c", "name": "n"}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": "c", "name": "n", "arguments": []}]},
         "a tool call in the host's completion is malformed"),
        ({"tool_calls": [{"id": "c", "name": "n", "arguments": {}}, 5]},
         "a tool call in the host's completion is malformed"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_refused(answer: dict[str, Any], message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        completion_from_wire(answer)
    assert str(caught.value) == message


# --- the host's remote MCP sessions ------------------------------------------------------


def _server(name: str = "docs", url: str = "https://mcp.example/x", **kw: Any) -> RemoteServerDef:
    return RemoteServerDef(name=name, url=url, **kw)


def _header(secret: str, prefix: str = "Bearer ") -> HeaderDef:
    return HeaderDef("Authorization", SecretRef(secret=secret, secret_key="k"), prefix)


def _secrets(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text("".join(f"{k}: {v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return path


def test_one_session_per_group_and_server_made_again_when_its_target_changes(
    tmp_path: Path,
) -> None:
    links = RemoteLinks()
    secrets = _secrets(tmp_path, TOKEN="one")
    server = _server(headers=(_header("TOKEN"),))
    first = links.link("fam", server, secrets)
    assert first.name == "docs"
    assert (first.target.url, first.target.transport) == ("https://mcp.example/x", "http")
    assert first.target.headers == {"Authorization": "Bearer one"}
    assert links.link("fam", server, secrets) is first  # unchanged: the same session
    other_group = links.link("work", server, secrets)
    assert other_group is not first
    closed: list[str] = []
    first.close = lambda: closed.append("first")  # type: ignore[method-assign]
    _secrets(tmp_path, TOKEN="two")  # the credential changed
    second = links.link("fam", server, secrets)
    assert second is not first and second.target.headers == {"Authorization": "Bearer two"}
    assert closed == ["first"]
    assert links.link("work", server, secrets) is not other_group  # its credential too


@pytest.mark.parametrize(
    "changed",
    [
        _server(url="https://mcp.example/y"),
        _server(transport="sse"),
        _server(headers=(_header("TOKEN", prefix="Token "),)),
    ],
)
def test_a_changed_definition_makes_a_new_session(tmp_path: Path, changed: RemoteServerDef) -> None:
    links = RemoteLinks()
    secrets = _secrets(tmp_path, TOKEN="one")
    first = links.link("fam", _server(headers=(_header("TOKEN"),)), secrets)
    closed: list[bool] = []
    first.close = lambda: closed.append(True)  # type: ignore[method-assign]
    assert links.link("fam", changed, secrets) is not first
    assert closed == [True]


def test_a_header_value_is_part_of_the_stamp_not_only_its_name(tmp_path: Path) -> None:
    links = RemoteLinks()
    secrets = _secrets(tmp_path, A="x", B="y")
    first = links.link("fam", _server(headers=(_header("A"),)), secrets)
    assert links.link("fam", _server(headers=(_header("B"),)), secrets) is not first


def test_a_missing_secret_is_named_and_leaves_the_sessions_as_they_were(tmp_path: Path) -> None:
    links = RemoteLinks()
    secrets = _secrets(tmp_path)
    with pytest.raises(MissingSecret, match=r"mcp_servers\.docs\.headers\.Authorization"):
        links.link("fam", _server(headers=(_header("NOPE"),)), secrets)
    assert links._links == {}


def test_close_closes_every_session_once(tmp_path: Path) -> None:
    links = RemoteLinks()
    closed: list[str] = []
    for folder in ("a", "b"):
        link = links.link(folder, _server(), None)
        link.close = lambda folder=folder: closed.append(folder)  # type: ignore[method-assign]
    links.close()
    assert sorted(closed) == ["a", "b"]
    links.close()
    assert sorted(closed) == ["a", "b"]
    assert links.link("a", _server(), None).name == "docs"  # a new one after


# --- the console script -----------------------------------------------------------------


class Called(Exception):
    pass


def _stub(monkeypatch: pytest.MonkeyPatch, module: str, name: str, fn: Any) -> None:
    monkeypatch.setitem(sys.modules, module, SimpleNamespace(**{name: fn}))


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Each entry point the console script may take, recorded instead of run."""
    taken: list[tuple[str, Any]] = []
    _stub(monkeypatch, "orchestrator.agent.memory_hook", "main",
          lambda args: taken.append(("hook", args)) or 3)  # fmt: skip
    _stub(monkeypatch, "orchestrator.agent.serve", "main",
          lambda: taken.append(("serve", None)) or 4)  # fmt: skip
    answered = {"value": False}
    _stub(monkeypatch, "orchestrator.image.noop", "answer_from_console",
          lambda args: taken.append(("noop", list(args))) or answered["value"])  # fmt: skip

    def cli() -> None:
        taken.append(("cli", list(sys.argv)))
        raise Called

    _stub(monkeypatch, "orchestrator.cli", "main", cli)
    taken.append(("answered", answered))
    return taken


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int | None:
    monkeypatch.setattr(sys, "argv", ["orchestrator", *args])
    try:
        entry.main()
    except SystemExit as done:
        return int(done.code or 0)
    except Called:
        return None
    raise AssertionError("main returned")


def test_the_hook_takes_the_arguments_after_its_two_words(
    monkeypatch: pytest.MonkeyPatch, routes: list[tuple[str, Any]]
) -> None:
    assert _run(monkeypatch, "hook", "session-start", "--source", "clear") == 3
    assert routes[1:] == [("hook", ["--source", "clear"])]


def test_agent_serve_exactly_starts_the_runner(
    monkeypatch: pytest.MonkeyPatch, routes: list[tuple[str, Any]]
) -> None:
    assert _run(monkeypatch, "agent", "serve") == 4
    assert routes[1:] == [("serve", None)]
    del routes[1:]
    assert _run(monkeypatch, "agent", "serve", "--help") is None
    assert routes[1:] == [("cli", ["orchestrator", "agent", "serve", "--help"])]


def test_an_image_build_with_nothing_to_do_ends_before_the_cli(
    monkeypatch: pytest.MonkeyPatch, routes: list[tuple[str, Any]]
) -> None:
    routes[0][1]["value"] = True
    assert _run(monkeypatch, "image", "build", "--offline") == 0
    assert routes[1:] == [("noop", ["image", "build", "--offline"])]


def test_an_image_build_it_cannot_answer_goes_to_the_cli(
    monkeypatch: pytest.MonkeyPatch, routes: list[tuple[str, Any]]
) -> None:
    assert _run(monkeypatch, "image", "build") is None
    assert routes[1:] == [("noop", ["image", "build"]), ("cli", ["orchestrator", "image", "build"])]


@pytest.mark.parametrize(
    "args",
    [(), ("hook",), ("hook", "other"), ("agent",), ("image",), ("image", "list"), ("status",)],
)
def test_everything_else_goes_to_the_cli(
    monkeypatch: pytest.MonkeyPatch, routes: list[tuple[str, Any]], args: tuple[str, ...]
) -> None:
    assert _run(monkeypatch, *args) is None
    assert routes[1:] == [("cli", ["orchestrator", *args])]


# --- the MCP probe: in the container, and its answer read on the host ---------------------

from orchestrator.agent import mcp_probe as agent_probe  # noqa: E402
from orchestrator.mcp.tools import ListedTool  # noqa: E402
from orchestrator.runtime.mcp_probe import ProbeFailed, list_stdio_tools  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _probe_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    **entry: Any,
) -> dict[str, Any]:
    (tmp_path / "files").mkdir(exist_ok=True)
    monkeypatch.setenv("ORCHESTRATOR_AGENT_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert agent_probe.main([json.dumps(entry)]) == 0
    out = capfd.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one line of JSON
    return dict(json.loads(out))


def test_the_probe_lists_a_stdio_servers_tools_with_their_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    answer = _probe_in(
        tmp_path, monkeypatch, capfd,
        command=sys.executable, args=["-m", "tests.mcpservers", "stdio", "--tools", "2"],
        env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert answer.get("cut") == 0, answer
    names = [t["name"] for t in answer["tools"]]
    assert "echo" in names and len(names) == len(set(names))
    echo = next(t for t in answer["tools"] if t["name"] == "echo")
    assert echo["description"] == "Say the text back."
    tool = ListedTool(echo["name"], echo["description"], echo["schema"])
    assert echo["digest"] == tool.digest and set(echo) == {
        "name",
        "description",
        "schema",
        "digest",
    }


def test_a_server_that_cannot_start_is_an_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    answer = _probe_in(tmp_path, monkeypatch, capfd, command=str(tmp_path / "no-such-server"))
    assert set(answer) == {"error"}
    assert answer["error"].startswith(
        f"MCP server 'probe' ({tmp_path}/no-such-server) could not start: "
    )


class _Runtime:
    def __init__(self, code: int, out: str) -> None:
        self.code, self.out = code, out
        self.asked: list[tuple[Any, list[str]]] = []

    def probe(self, group: Any, argv: list[str]) -> tuple[int, str]:
        self.asked.append((group, argv))
        return self.code, self.out


_GROUP = SimpleNamespace(folder="fam")
_SERVER = SimpleNamespace(name="notes", command="npx", args=("-y", "srv"), env={"K": "v"})


def _listed(out: str, code: int = 0) -> tuple[list[ListedTool], int]:
    runtime = _Runtime(code, out)
    result = list_stdio_tools(runtime, _GROUP, _SERVER)  # type: ignore[arg-type]
    assert runtime.asked == [
        (
            _GROUP,
            [
                "python3",
                "-m",
                "orchestrator.agent.mcp_probe",
                '{"command": "npx", "args": ["-y", "srv"], "env": {"K": "v"}}',
            ],
        )
    ]
    return result


def test_the_hosts_reading_takes_the_last_line_of_the_probes_output() -> None:
    tool = {"name": "t", "description": "d", "schema": {"type": "object"}}
    out = "npm noise\n" + json.dumps({"tools": [tool], "cut": 3}) + "\n\n"
    assert _listed(out) == ([ListedTool("t", "d", {"type": "object"})], 3)
    assert _listed(json.dumps({"tools": []})) == ([], 0)
    assert _listed(json.dumps({"tools": [], "cut": None})) == ([], 0)


@pytest.mark.parametrize(
    ("out", "code", "message", "hint"),
    [
        ("", 127, "the probe of MCP server 'notes' in fam's image gave no answer (exit code 127)",
         "is the group's image built? orchestrator group packages fam"),
        ("not json\n", 1, "the probe of MCP server 'notes' in fam's image gave no answer "
         "(exit code 1)", "is the group's image built? orchestrator group packages fam"),
        ('{"error": "  spawn npx ENOENT \\n"}', 0,
         "the probe of MCP server 'notes' in fam's image failed: spawn npx ENOENT", None),
        ('{"error": " "}', 0,
         "the probe of MCP server 'notes' in fam's image failed: it gave no reason", None),
        ("[1]", 0, "the probe of MCP server 'notes' in fam's image gave an answer of the "
         "wrong shape: it is not an object", None),
        ('{"tools": {}}', 0, "the probe of MCP server 'notes' in fam's image gave an answer "
         "of the wrong shape: it has no list of tools", None),
        ('{"tools": [{"name": ""}]}', 0, "the probe of MCP server 'notes' in fam's image gave "
         "an answer of the wrong shape: a listed tool needs a name", None),
        ('{"tools": [], "cut": "many"}', 0, "the probe of MCP server 'notes' in fam's image "
         "gave an answer of the wrong shape: invalid literal for int() with base 10: 'many'",
         None),
        ('{"tools": [], "cut": [1]}', 0, "the probe of MCP server 'notes' in fam's image gave "
         "an answer of the wrong shape: int() argument must be a string, a bytes-like object "
         "or a real number, not 'list'", None),
        ('{"tools": [], "cut": 1e999}', 0, "the probe of MCP server 'notes' in fam's image "
         "gave an answer of the wrong shape: cannot convert float infinity to integer", None),
    ],
)  # fmt: skip
def test_each_bad_answer_of_a_probe_is_named(
    out: str, code: int, message: str, hint: str | None
) -> None:
    with pytest.raises(ProbeFailed) as caught:
        _listed(out, code)
    assert caught.value.message == message
    assert caught.value.hint == hint
    assert caught.value.__suppress_context__ or caught.value.__context__ is None


# --- the offline base image's recipe ------------------------------------------------------

from orchestrator.image import recipe  # noqa: E402


def test_the_recipe_hash_is_of_the_sorted_packages_and_everything_else() -> None:
    expected = hashlib.sha256(
        json.dumps(
            {
                "suite": "bookworm",
                "packages": sorted(recipe.PACKAGES),
                "excludes": list(recipe.EXCLUDES),
                "changes": list(recipe.IMPORT_CHANGES),
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()
    assert recipe.recipe_hash() == expected
    assert recipe.base_tag() == f"orchestrator-base:bookworm-{expected[:12]}"


def test_extra_packages_make_another_base_whatever_their_order_or_repeats() -> None:
    plain = recipe.recipe_hash()
    assert recipe.recipe_hash(("curl",)) == plain  # already in the base
    assert recipe.recipe_hash(("b", "a")) == recipe.recipe_hash(("a", "b", "a"))
    assert recipe.recipe_hash(("a",)) != plain
    assert (
        recipe.base_tag(("a",)) == f"orchestrator-base:bookworm-{recipe.recipe_hash(('a',))[:12]}"
    )


def test_the_probe_starts_the_server_in_files_with_the_entrys_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "files").mkdir()
    server = tmp_path / "files" / "srv"
    server.write_text(  # it starts only with the entry's variable, as given
        '#!/bin/sh\n[ "$PROBE_KEY" = v1 ] || exit 3\n'
        f"exec {sys.executable} -m tests.mcpservers stdio\n"
    )
    server.chmod(0o755)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the entry's env must bring it
    monkeypatch.chdir(tmp_path)
    answer = _probe_in(
        tmp_path,
        monkeypatch,
        capfd,
        command="./srv",
        env={"PYTHONPATH": str(ROOT), "PROBE_KEY": "v1"},
    )
    assert "echo" in [t["name"] for t in answer.get("tools", [])], answer


def test_a_server_that_never_lists_fails_at_the_listings_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(agent_probe, "MCP_LIST_TIMEOUT_SECONDS", 1.0)
    answer = _probe_in(tmp_path, monkeypatch, capfd, command="sleep", args=["60"])
    assert answer == {"error": "MCP server 'probe': it did not start within 1 s"}

"""Exact findings of ``orchestrator doctor``'s checks of the configuration
(service/doctor.py): the groups (each invalid group.yaml with its error), the memory
histories that cannot record, the providers' keys, the transcribers (an endpoint's key, a
local model's files, faster-whisper) and what groups name, the channel accounts (their
secrets, the daemon's last word on each, their kind's advice), the web (bridge networks,
web policies, search backends), the money caps (spent, paused), and the order
``run_checks`` puts every finding in. Each check is called directly on a temporary home
with orchestrator.yaml, group.yaml and the environment written for the case; each
finding's name, status, detail and hint are pinned whole."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.service import doctor
from orchestrator.service.doctor import (
    FAIL,
    OK,
    WARN,
    Check,
    _handle,
    check_budgets,
    check_channels,
    check_groups,
    check_histories,
    check_providers,
    check_transcription,
    check_web,
    run_checks,
)

GROUP_HINT = "fix its group.yaml"


@pytest.fixture
def h(tmp_path: Path) -> Home:
    root = tmp_path / "home"
    root.mkdir()
    return Home(root)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "DOC_KEY",
        "DOC_MISSING",
        "DOC_TOKEN",
        "DOC_APP",
        "DOC_SEARCH",
        "ORCHESTRATOR_HTTP_TOKEN",
        "ORCHESTRATOR_HTTP_LISTEN",
        "ORCHESTRATOR_HOST_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    yield


def config(h: Home, text: str) -> None:
    h.config_file.write_text(text)


def add_group(h: Home, name: str, *edits: tuple[str, str], extra: str = "") -> Path:
    """A group made as ``group add`` makes it, its group.yaml edited (old, new) and
    appended to."""
    group = GroupStore(h).add(GroupConfig(name=name))
    text = group.config_file.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    group.config_file.write_text(text + extra)
    return group.config_file


Configure = Callable[..., Path]


@pytest.fixture
def configure(h: Home, monkeypatch: pytest.MonkeyPatch) -> Configure:
    """Writes orchestrator.yaml holding ``text``, each keyword in capitals set in the
    environment; with ``secrets``, a secrets file holding them (of ``mode``) is written
    first and named on the file's first line. Gives the secrets file's path."""

    def write(text: str, secrets: str | None = None, mode: int = 0o600, **env: str) -> Path:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        path = h.root / "secrets.yaml"
        if secrets is not None:
            path.write_text(secrets)
            path.chmod(mode)
            text = f"secrets_file: {path}\n" + text
        config(h, text)
        return path

    return write


# check_groups


def test_no_group_is_zero_valid(h: Home) -> None:
    assert check_groups(h) == [Check("groups", OK, "0 valid")]


def test_valid_groups_are_counted(h: Home) -> None:
    add_group(h, "fam")
    add_group(h, "work")
    assert check_groups(h) == [Check("groups", OK, "2 valid")]


def test_each_invalid_group_fails_with_its_error_and_the_count_is_left_out(h: Home) -> None:
    add_group(h, "fam")
    bad = h.groups_dir / "bad"
    bad.mkdir()
    (bad / "group.yaml").write_text("name: Bad\nnope: 1\n")
    (h.groups_dir / "empty").mkdir()
    assert check_groups(h) == [
        Check(
            "group bad",
            FAIL,
            f"{bad}/group.yaml:2: nope: unknown key; valid keys here: container, "
            "context_budget, creators, learned_max_chars, limits, mcp, media, members, "
            "memory, model, models, mounts, name, packages, provider, session_mode, skills, "
            "tasks, timezone, tools, turn_timeout, unknown_senders, version, web",
            GROUP_HINT,
        ),
        Check("group empty", FAIL, f"{h.groups_dir}/empty has no group.yaml", GROUP_HINT),
    ]


def test_an_invalid_group_without_a_problem_says_invalid(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = [
        SimpleNamespace(folder="odd", group=None, problem=None),
        SimpleNamespace(folder="fine", group=object(), problem=None),
    ]
    monkeypatch.setattr(GroupStore, "listing", lambda self: listing)
    assert check_groups(h) == [Check("group odd", FAIL, "invalid", GROUP_HINT)]


# check_histories


def test_histories_that_record_say_nothing_and_each_gap_is_a_warning(h: Home) -> None:
    from orchestrator.memory.history import History

    add_group(h, "fam")
    add_group(h, "quiet")
    add_group(h, "work")
    assert check_histories(h) == []
    for folder in ("fam", "work"):
        History(h.groups_dir, folder)._note_gap(OSError(5, "Input/output error"))
    found = check_histories(h)
    hint = "changes found once it records again are unattributed; see orchestrator logs --daemon"
    assert [(c.name, c.status, c.hint) for c in found] == [
        ("history fam", WARN, hint),
        ("history work", WARN, hint),
    ]
    for check, folder in zip(found, ("fam", "work"), strict=True):
        gap = History(h.groups_dir, folder).gap()
        assert gap is not None
        assert check.detail == gap.describe()
        assert check.detail.startswith("not recording since ")
        assert check.detail.endswith(": OSError: [Errno 5] Input/output error")


def test_a_gaps_undecodable_bytes_are_escaped(h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.memory.history import History

    add_group(h, "fam")

    class Gap:
        def describe(self) -> str:
            return "not recording: bad \udcff name"

    monkeypatch.setattr(History, "gap", lambda self: Gap())
    [check] = check_histories(h)
    assert check.detail == "not recording: bad \\xff name"


# check_providers


def test_no_provider_no_finding(h: Home) -> None:
    assert check_providers(h) == []


def test_each_provider_in_name_order_with_where_its_key_comes_from(
    h: Home, configure: Configure
) -> None:
    secrets = configure(
        "providers:\n"
        "  zed:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "  claude:\n    kind: anthropic\n    key_env: DOC_KEY\n"
        "  missing:\n    kind: anthropic\n    key_env: DOC_MISSING\n"
        "  gone:\n    kind: openai\n    key_secret: absent\n"
        "  kept:\n    kind: openai\n    key_secret: vault\n",
        secrets="vault: s3cret-value-here\n",
        DOC_KEY="k" * 24,
    )
    assert check_providers(h) == [
        Check("provider claude", OK, "anthropic at https://api.anthropic.com; key: env DOC_KEY"),
        Check("provider gone", FAIL, f"provider 'gone': {secrets} has no entry 'absent'", ""),
        Check("provider kept", OK, "openai at https://api.openai.com/v1; key: secret vault"),
        Check(
            "provider missing",
            FAIL,
            "provider 'missing': environment variable DOC_MISSING is not set",
            "export DOC_MISSING=... for the daemon, or use key_secret",
        ),
        Check("provider zed", OK, "openai at http://127.0.0.1:9/v1; key: no key needed"),
    ]


def test_a_secrets_file_others_may_read_fails_each_provider_that_needs_it(
    h: Home, configure: Configure
) -> None:
    secrets = configure(
        "providers:\n"
        "  b:\n    kind: openai\n    key_secret: vault\n"
        "  a:\n    kind: openai\n    key_secret: vault\n"
        "  c:\n    kind: openai\n",
        secrets="vault: s3cret-value-here\n",
        mode=0o644,
    )
    refused = Check(
        "",
        FAIL,
        f"secrets file {secrets} has mode 0644; others may read it",
        f"chmod 600 {secrets}",
    )
    assert check_providers(h) == [
        Check("provider a", refused.status, refused.detail, refused.hint),
        Check("provider b", refused.status, refused.detail, refused.hint),
        Check("provider c", OK, "openai at https://api.openai.com/v1; key: no key needed"),
    ]


def test_a_refusal_without_a_hint_has_an_empty_hint(h: Home) -> None:
    secrets = h.root / "secrets-dir"
    secrets.mkdir()
    config(
        h,
        f"secrets_file: {secrets}\n"
        "providers:\n  a:\n    kind: openai\n    key_secret: vault\n"
        "  b:\n    kind: openai\n",
    )
    assert check_providers(h) == [
        Check("provider a", FAIL, f"secrets file {secrets} is not a regular file", ""),
        Check("provider b", OK, "openai at https://api.openai.com/v1; key: no key needed"),
    ]


# check_transcription


def test_no_transcriber_and_no_group_no_finding(h: Home) -> None:
    assert check_transcription(h) == []


def test_endpoints_are_checked_in_name_order_with_their_keys(h: Home, configure: Configure) -> None:
    secrets = configure(
        "transcription:\n"
        "  zed:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "  cloud:\n    kind: openai\n    key_env: DOC_KEY\n"
        "  missing:\n    kind: openai\n    key_env: DOC_MISSING\n"
        "  gone:\n    kind: openai\n    key_secret: absent\n"
        "  kept:\n    kind: openai\n    key_secret: other\n",
        secrets="other: value-of-it\n",
        DOC_KEY="k" * 24,
    )
    assert check_transcription(h) == [
        Check("transcription cloud", OK, "https://api.openai.com/v1; key: env DOC_KEY"),
        Check(
            "transcription gone", FAIL, f"transcription.gone: {secrets} has no entry 'absent'", ""
        ),
        Check("transcription kept", OK, "https://api.openai.com/v1; key: secret other"),
        Check(
            "transcription missing",
            FAIL,
            "transcription.missing: environment variable DOC_MISSING is not set",
            "export DOC_MISSING=... for the daemon, or use key_secret",
        ),
        Check("transcription zed", OK, "http://127.0.0.1:9/v1; key: no key needed"),
    ]


def test_local_models_need_their_files_and_faster_whisper(
    h: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    empty, partial, whole = (tmp_path / n for n in ("empty", "partial", "whole"))
    for folder in (empty, partial, whole):
        folder.mkdir()
    (partial / "config.json").write_text("{}")
    (partial / "tokenizer.json").mkdir()  # a folder is not the file
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (whole / name).write_text("x")
    config(
        h,
        "transcription:\n"
        f"  c-whole:\n    kind: local\n    model_dir: {whole}\n"
        f"  b-partial:\n    kind: local\n    model_dir: {partial}\n"
        f"  a-empty:\n    kind: local\n    model_dir: {empty}\n"
        f"  d-whole:\n    kind: local\n    model_dir: {whole}\n",
    )
    hint = "model_dir must be a CTranslate2 Whisper model folder"
    lacking = [
        Check(
            "transcription a-empty",
            FAIL,
            f"{empty} lacks model.bin, config.json, tokenizer.json",
            hint,
        ),
        Check("transcription b-partial", FAIL, f"{partial} lacks model.bin, tokenizer.json", hint),
    ]
    asked: list[str] = []
    real_find_spec = importlib.util.find_spec

    def no_whisper(name: str, *args: Any) -> Any:
        if name == "faster_whisper":
            asked.append(name)
            return None
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_whisper)
    not_installed = (
        "faster-whisper is not installed",
        "pip install 'orchestrator[transcribe-local]'",
    )
    assert check_transcription(h) == [
        *lacking,
        Check("transcription c-whole", FAIL, *not_installed),
        Check("transcription d-whole", FAIL, *not_installed),
    ]
    assert asked == ["faster_whisper", "faster_whisper"]

    def whisper(name: str, *args: Any) -> Any:
        return object() if name == "faster_whisper" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", whisper)
    assert check_transcription(h) == [
        *lacking,
        Check("transcription c-whole", OK, f"a local model in {whole}"),
        Check("transcription d-whole", OK, f"a local model in {whole}"),
    ]


def test_groups_naming_an_undefined_transcriber_fail(h: Home) -> None:
    config(
        h,
        "transcription:\n  cloud:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n",
    )
    add_group(h, "a-off", extra="media:\n  transcribe: 'off'\n")
    add_group(h, "b-cloud", extra="media:\n  transcribe: cloud\n")
    add_group(h, "c-else", extra="media:\n  transcribe: elsewhere\n")
    add_group(h, "d-default")
    add_group(h, "e-more", extra="media:\n  transcribe: more\n")
    (h.groups_dir / "f-broken").mkdir()
    hint = "define it under transcription, or set media.transcribe: off"
    assert check_transcription(h) == [
        Check("transcription cloud", OK, "http://127.0.0.1:9/v1; key: no key needed"),
        Check(
            "group c-else",
            FAIL,
            "media.transcribe names 'elsewhere', which orchestrator.yaml does not define",
            hint,
        ),
        Check(
            "group e-more",
            FAIL,
            "media.transcribe names 'more', which orchestrator.yaml does not define",
            hint,
        ),
    ]


# _handle


@pytest.mark.parametrize(
    ("bot", "handle"),
    [
        ("fambot", "@fambot"),
        ("@already", "@already"),
        ("bot@example.org", "bot@example.org"),
        ("@alice:matrix.org", "@alice:matrix.org"),
        (None, "@?"),
        ("", "@?"),
        (42, "@42"),
    ],
)
def test_a_bot_as_people_write_it(bot: object, handle: str) -> None:
    assert _handle(bot) == handle


# check_channels


def health(h: Home, account: str, data: object, *chats: str) -> None:
    """What the daemon last recorded of ``account``, and the chats bound to it."""
    from orchestrator.store.chats import ChatStore
    from orchestrator.store.messages import open_queue

    queue = open_queue(h)
    try:
        store = ChatStore(queue)
        store.set_state(account, "health", json.dumps(data))
        for chat in chats:
            store.bind(account, chat, "fam")
    finally:
        queue.close()


def telegram(*names: str, env: str = "DOC_TOKEN") -> str:
    """Telegram accounts of orchestrator.yaml, each with its token in ``env``."""
    return "".join(f"  {name}:\n    kind: telegram\n    token_env: {env}\n" for name in names)


def test_no_channel_account_no_finding_and_no_queue_made(h: Home) -> None:
    assert check_channels(h) == []
    assert not (h.state_dir / "queue.db").exists()
    config(h, "channels: {}\n")
    assert check_channels(h) == []


def test_accounts_not_started_yet_in_name_order(h: Home, configure: Configure) -> None:
    configure(
        "channels:\n"
        + telegram("zed")
        + "  team:\n    kind: slack\n    bot_token_secret: bot\n    app_token_env: DOC_APP\n"
        + telegram("fambot"),
        secrets="bot: xoxb-secret-value\n",
        DOC_TOKEN="1234:" + "t" * 30,
        DOC_APP="xapp-" + "a" * 30,
    )
    expected = [
        Check("channel fambot", OK, "telegram; token: env DOC_TOKEN; not started yet"),
        Check("channel team", OK, "slack; bot_token: secret bot; not started yet"),
        Check("channel zed", OK, "telegram; token: env DOC_TOKEN; not started yet"),
    ]
    assert check_channels(h) == expected  # no queue yet
    assert not (h.state_dir / "queue.db").exists()
    health(h, "other", {"state": "connected"})
    assert check_channels(h) == expected  # a queue, but nothing recorded of these


def test_secrets_that_cannot_be_found_fail_and_the_next_accounts_are_checked(
    h: Home, configure: Configure
) -> None:
    secrets = configure(
        "channels:\n"
        + telegram("a-missing", env="DOC_MISSING")
        + "  b-app:\n    kind: slack\n    bot_token_env: DOC_TOKEN\n"
        + "    app_token_env: DOC_MISSING\n"
        + "  c-gone:\n    kind: slack\n    bot_token_env: DOC_TOKEN\n    app_token_secret: gone\n"
        + "  d-fine:\n    kind: slack\n    bot_token_env: DOC_TOKEN\n    app_token_secret: bot\n",
        secrets="bot: xoxb-secret-value\n",
        DOC_TOKEN="xoxb-" + "t" * 30,
    )
    assert check_channels(h) == [
        Check(
            "channel a-missing",
            FAIL,
            "channel account 'a-missing': environment variable DOC_MISSING is not set",
            "export DOC_MISSING=... for the daemon, or use token_secret",
        ),
        Check(
            "channel b-app",
            FAIL,
            "channel account 'b-app': environment variable DOC_MISSING is not set",
            "export DOC_MISSING=... for the daemon, or use app_token_secret",
        ),
        Check(
            "channel c-gone", FAIL, f"channel account 'c-gone': {secrets} has no entry 'gone'", ""
        ),
        Check("channel d-fine", OK, "slack; bot_token: env DOC_TOKEN; not started yet"),
    ]


def test_an_account_the_daemon_cannot_reach_fails_with_its_last_error(
    h: Home, configure: Configure
) -> None:
    configure(
        "channels:\n"
        + telegram("fambot")
        + "  team:\n    kind: slack\n    bot_token_env: DOC_TOKEN\n    app_token_env: DOC_TOKEN\n",
        DOC_TOKEN="xoxb-" + "t" * 30,
    )
    health(h, "fambot", {"state": "error", "last_error": "401 Unauthorized", "bot": "fam"})
    health(h, "team", {"state": "error"})
    assert check_channels(h) == [
        Check(
            "channel fambot",
            FAIL,
            "cannot reach telegram: 401 Unauthorized",
            "check the token and the network (the daemon keeps retrying)",
        ),
        Check(
            "channel team",
            FAIL,
            "cannot reach slack: no reason recorded",
            "check the bot_token and the network (the daemon keeps retrying)",
        ),
    ]


def test_a_connected_account_says_its_bot_chats_and_counts(h: Home, configure: Configure) -> None:
    configure(
        "channels:\n"
        + telegram("fambot")
        + "  team:\n    kind: slack\n    bot_token_env: DOC_TOKEN\n    app_token_env: DOC_TOKEN\n"
        + telegram("zed"),
        DOC_TOKEN="xoxb-" + "t" * 30,
    )
    add_group(h, "fam")
    health(
        h,
        "fambot",
        {
            "state": "connected",
            "bot": "fam_bot",
            "messages_in": 7,
            "messages_out": 3,
            "can_read_all_group_messages": True,
        },
        "-100",
        "42",
    )
    health(h, "team", {"state": "connected", "bot": "U1@team"}, "C1")
    health(h, "zed", {"state": "polling"}, "-5")
    assert check_channels(h) == [
        Check("channel fambot", OK, "telegram @fam_bot connected; 2 chats bound; 7 in, 3 out"),
        Check("channel team", OK, "slack U1@team connected; 1 chat bound; 0 in, 0 out"),
        Check("channel zed", OK, "telegram @? polling; 1 chat bound; 0 in, 0 out"),
    ]


def test_privacy_mode_with_group_chats_bound_is_a_warning(h: Home, configure: Configure) -> None:
    configure("channels:\n" + telegram("fambot", "other", "private"), DOC_TOKEN="1234:" + "t" * 30)
    add_group(h, "fam")
    hidden = {"state": "connected", "bot": "fam_bot", "can_read_all_group_messages": False}
    health(h, "fambot", hidden, "-100", "-200", "42")
    health(h, "other", {**hidden, "bot": "other_bot"}, "-300")
    health(h, "private", {**hidden, "bot": "p_bot"}, "7")  # no group chat: nothing hidden
    hint = (
        "to let it see every message: @BotFather, /setprivacy, Disable, then remove the "
        "bot from those groups and add it again (or make it a group admin)"
    )
    assert check_channels(h) == [
        Check(
            "channel fambot",
            WARN,
            "@fam_bot has Telegram's privacy mode on: in the 2 group chats bound it is sent "
            "only commands (/...), replies to its own messages and service messages, not the "
            "rest of the conversation",
            hint,
        ),
        Check(
            "channel other",
            WARN,
            "@other_bot has Telegram's privacy mode on: in the 1 group chat bound it is sent "
            "only commands (/...), replies to its own messages and service messages, not the "
            "rest of the conversation",
            hint,
        ),
        Check("channel private", OK, "telegram @p_bot connected; 1 chat bound; 0 in, 0 out"),
    ]


def test_an_account_of_a_kind_no_longer_known_has_no_advice(
    h: Home, configure: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.config.kinds as kinds

    configure("channels:\n" + telegram("fambot"), DOC_TOKEN="1234:" + "t" * 30)
    health(h, "fambot", {"state": "connected", "bot": "b", "can_read_all_group_messages": False})
    monkeypatch.setattr(kinds, "account_kinds", lambda: {})
    assert check_channels(h) == [
        Check("channel fambot", OK, "telegram @b connected; 0 chats bound; 0 in, 0 out")
    ]


def test_the_queue_is_closed_whatever_happens(
    h: Home, configure: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.store.messages as messages

    configure("channels:\n" + telegram("fambot"), DOC_TOKEN="1234:" + "t" * 30)
    health(h, "fambot", {"state": "connected"})
    opened: list[Any] = []
    real = messages.open_queue_if_any

    def spied(home: Home) -> Any:
        queue: Any = real(home)
        opened.append(queue)
        closes = queue.close

        def close() -> None:
            opened.append("closed")
            closes()

        queue.close = close
        return queue

    monkeypatch.setattr(messages, "open_queue_if_any", spied)
    [check] = check_channels(h)
    assert check == Check("channel fambot", OK, "telegram @? connected; 0 chats bound; 0 in, 0 out")
    assert opened[1:] == ["closed"]

    from orchestrator.store import chats

    def broken(self: Any, account: str) -> None:
        raise RuntimeError("read failed")

    monkeypatch.setattr(chats.ChatStore, "health", broken)
    opened.clear()
    with pytest.raises(RuntimeError, match="read failed"):
        check_channels(h)
    assert opened[1:] == ["closed"]


# check_web

BRIDGE = Check(
    "",
    WARN,
    "container.network: bridge: the container has a network of its own, outside every web "
    "policy, and can reach this host's private addresses",
    "use container.network: none and the group's web policy instead",
)


def test_no_group_and_no_backend_no_finding(h: Home) -> None:
    add_group(h, "fam")
    assert check_web(h) == []


def test_bridge_groups_warn_and_web_groups_say_what_they_reach(h: Home) -> None:
    add_group(h, "a-any", extra="web:\n  enabled: true\n")
    add_group(h, "b-bridge", ("network: none", "network: bridge"))
    add_group(
        h,
        "b-wild",
        extra="web:\n  enabled: true\n  trust: [creator, member]\n"
        "  allow: ['*.wikipedia.org', example.org]\n"
        "  allow_addresses: ['127.0.0.1:8080', '10.0.0.2:443']\n",
    )
    add_group(h, "c-off", extra="web:\n  enabled: false\n  allow: [example.org]\n")
    add_group(h, "d-bridge", ("network: none", "network: bridge"))
    add_group(h, "e-opened", extra="web:\n  enabled: true\n  allow_addresses: ['127.0.0.1:9']\n")
    assert check_web(h) == [
        Check(
            "web a-any", OK, "web on for creator: any public name (web_fetch); nothing (the shell)"
        ),
        Check("group b-bridge", BRIDGE.status, BRIDGE.detail, BRIDGE.hint),
        Check(
            "web b-wild",
            OK,
            "web on for creator, member: *.wikipedia.org, example.org; opened: "
            "127.0.0.1:8080, 10.0.0.2:443",
        ),
        Check("group d-bridge", BRIDGE.status, BRIDGE.detail, BRIDGE.hint),
        Check(
            "web e-opened",
            OK,
            "web on for creator: any public name (web_fetch); nothing (the shell); opened: "
            "127.0.0.1:9",
        ),
    ]


def test_each_search_backend_is_asked_once_with_its_key(
    h: Home, configure: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.web.search as web_search
    from orchestrator.web.search import SearchFailed

    configure(
        "web_search:\n"
        "  zed:\n    kind: searxng\n    url: http://127.0.0.1:9\n"
        "  brave:\n    kind: brave\n    key_env: DOC_SEARCH\n"
        "  down:\n    kind: searxng\n    url: http://127.0.0.1:10\n"
        "  nokey:\n    kind: brave\n    key_env: DOC_MISSING\n"
        "  plain:\n    kind: searxng\n    url: http://127.0.0.1:11\n"
        "  vault:\n    kind: brave\n    key_secret: searching\n",
        secrets="searching: vault-key-value\n",
        DOC_SEARCH="brave-key-" + "b" * 20,
    )
    asked: list[tuple[str, str, str | None, dict[str, Any]]] = []

    def fake_search(backend: Any, query: str, key: str | None, **options: Any) -> list[Any]:
        asked.append((backend.name, query, key, options))
        if backend.name == "down":
            raise SearchFailed("web_search down: no answer", hint="is it running?")
        if backend.name == "plain":
            raise SearchFailed("web_search plain: an answer that is not JSON")
        return []

    monkeypatch.setattr(web_search, "search", fake_search)
    assert check_web(h) == [
        Check("web_search zed", OK, "searxng at http://127.0.0.1:9 answers"),
        Check(
            "web_search brave",
            OK,
            "brave at https://api.search.brave.com/res/v1/web/search answers",
        ),
        Check("web_search down", FAIL, "web_search down: no answer", "is it running?"),
        Check(
            "web_search nokey",
            FAIL,
            "web_search.nokey: environment variable DOC_MISSING is not set",
            "export DOC_MISSING=... for the daemon, or use key_secret",
        ),
        Check("web_search plain", FAIL, "web_search plain: an answer that is not JSON", ""),
        Check(
            "web_search vault",
            OK,
            "brave at https://api.search.brave.com/res/v1/web/search answers",
        ),
    ]
    one = {"max_results": 1}
    assert asked == [
        ("zed", "orchestrator doctor", None, one),
        ("brave", "orchestrator doctor", "brave-key-" + "b" * 20, one),
        ("down", "orchestrator doctor", None, one),
        ("plain", "orchestrator doctor", None, one),
        ("vault", "orchestrator doctor", "vault-key-value", one),
    ]


def test_a_search_that_breaks_otherwise_is_not_hidden(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.web.search as web_search

    config(h, "web_search:\n  zed:\n    kind: searxng\n    url: http://127.0.0.1:9\n")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(web_search, "search", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        check_web(h)


# check_budgets

NOW = 1773576000.0  # 2026-03-15 12:00 UTC
PRICED = (
    "currency: EUR\nproviders:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
    "    models: [m-1]\n    model_info:\n      m-1:\n        prices: {input: 1, output: 2}\n"
)
PRICED_MODEL = (('provider: "offline"', "provider: fake"), ('model: "offline-rules"', "model: m-1"))


def capped(h: Home, name: str, caps: str, zone: str = "UTC") -> None:
    add_group(
        h,
        name,
        *PRICED_MODEL,
        ("# cost_per_day: 5\n", caps),
        ("timezone: UTC", f"timezone: {zone}"),
    )


def spend(h: Home, group: str, at: float, cost: float) -> None:
    from orchestrator.store.usage import Call, UsageStore

    usage = UsageStore(h.state_dir / "queue.db")
    try:
        usage.record(
            Call("m", group, "fake", "m-1", "chat", at, 10.0, 1, 1, "ok", cost=cost, currency="EUR")
        )
    finally:
        usage.close()


@pytest.fixture
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "time", SimpleNamespace(time=lambda: NOW))


def open_home_queue(h: Home) -> Any:
    from orchestrator.store.messages import open_queue

    return open_queue(h)


def test_no_capped_group_or_no_queue_no_finding(h: Home, fixed_now: None) -> None:
    config(h, PRICED)
    add_group(h, "plain", *PRICED_MODEL)
    open_home_queue(h).close()
    assert check_budgets(h) == []  # no cap
    capped(h, "fam", "cost_per_day: 5\n")
    (h.state_dir / "queue.db").unlink()
    for extra in ("queue.db-wal", "queue.db-shm"):
        (h.state_dir / extra).unlink(missing_ok=True)
    assert check_budgets(h) == []  # no queue yet
    assert not (h.state_dir / "queue.db").exists()


def test_a_queue_that_cannot_be_opened_is_left_to_the_queue_check(h: Home, fixed_now: None) -> None:
    config(h, PRICED)
    capped(h, "fam", "cost_per_day: 5\n")
    h.state_dir.mkdir(parents=True, exist_ok=True)
    (h.state_dir / "queue.db").write_bytes(b"not a database at all, " * 100)
    assert check_budgets(h) == []
    (h.state_dir / "queue.db").write_bytes(b"")  # its tables not made: doctor never makes them
    assert check_budgets(h) == []


def test_what_each_capped_group_spent_today_and_this_month_in_its_own_days(
    h: Home, fixed_now: None
) -> None:
    config(h, PRICED)
    capped(h, "fam", "cost_per_day: 5\n  cost_per_month: 50.5\n")
    capped(h, "month", "cost_per_month: 120\n")
    capped(h, "tokyo", "cost_per_day: 0.5\n", zone="Asia/Tokyo")
    add_group(h, "uncapped", *PRICED_MODEL)
    open_home_queue(h).close()
    day = 24 * 3600
    for group in ("fam", "month", "tokyo", "uncapped"):
        spend(h, group, NOW - 20 * day, 1000.0)  # last month
        spend(h, group, NOW - 3 * day, 100.25)  # this month, not today
        spend(h, group, NOW - 16 * 3600, 0.125)  # yesterday in UTC, today in Tokyo
        spend(h, group, NOW - 3600, 0.0625)  # today
    assert check_budgets(h) == [
        Check(
            "budget fam", OK, "spent 0.0625 EUR of 5 EUR today, 100.44 EUR of 50.5 EUR this month"
        ),
        Check("budget month", OK, "spent 100.44 EUR of 120 EUR this month"),
        Check("budget tokyo", OK, "spent 0.1875 EUR of 0.5 EUR today"),
    ]


def test_a_group_paused_by_its_cap_warns_until_when(h: Home, fixed_now: None) -> None:
    from orchestrator.relay.ops.model import BUDGET_HOLDER

    config(h, "currency: USD\n" + PRICED.removeprefix("currency: EUR\n"))
    capped(h, "fam", "cost_per_day: 5\n  cost_per_month: 20\n")
    capped(h, "kept", "cost_per_day: 2\n", zone="Asia/Tokyo")
    capped(h, "other", "cost_per_day: 3\n")
    capped(h, "tokyo", "cost_per_day: 1\n", zone="Asia/Tokyo")
    queue = open_home_queue(h)
    try:
        until = 4102444800.0  # 2100-01-01 00:00 UTC
        queue.pause("fam", "operator", "paused by the operator")
        queue.pause(
            "fam", BUDGET_HOLDER, "budget: the cap of 5 USD a day is reached", expires=until
        )
        queue.pause(
            "tokyo", BUDGET_HOLDER, "budget: the cap of 1 USD a day is reached", expires=until
        )
        queue.pause("kept", BUDGET_HOLDER, "budget: kept")
        queue.pause("other", "operator", "paused by the operator")
    finally:
        queue.close()
    spend(h, "fam", NOW - 60, 5.5)

    def hint(group: str) -> str:
        return (
            "its messages wait; to lift the cap until then: orchestrator group resume "
            f"{group} --budget"
        )

    assert check_budgets(h) == [
        Check(
            "budget fam",
            WARN,
            "paused until 2100-01-01 00:00 UTC: budget: the cap of 5 USD a day is reached; "
            "spent 5.5000 USD of 5 USD today, 5.5000 USD of 20 USD this month",
            hint("fam"),
        ),
        Check(
            "budget kept",
            WARN,
            "paused until resumed: budget: kept; spent 0.0000 USD of 2 USD today",
            hint("kept"),
        ),
        Check("budget other", OK, "spent 0.0000 USD of 3 USD today"),
        Check(
            "budget tokyo",
            WARN,
            "paused until 2100-01-01 09:00 JST: budget: the cap of 1 USD a day is reached; "
            "spent 0.0000 USD of 1 USD today",
            hint("tokyo"),
        ),
    ]


def test_the_queue_and_the_usage_store_are_closed_whatever_happens(
    h: Home, fixed_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.store.messages import MessageQueue
    from orchestrator.store.usage import UsageStore

    config(h, PRICED)
    capped(h, "fam", "cost_per_day: 5\n")
    open_home_queue(h).close()
    closed: list[str] = []
    for cls in (MessageQueue, UsageStore):
        real = cls.close

        def close(self: Any, real: Any = real, cls: type = cls) -> None:
            if type(self) is cls:
                closed.append(cls.__name__)
            real(self)

        monkeypatch.setattr(cls, "close", close)
    assert check_budgets(h) == [Check("budget fam", OK, "spent 0.0000 EUR of 5 EUR today")]
    assert sorted(closed) == ["MessageQueue", "UsageStore"]

    def broken(self: Any, group: str, since: float) -> float:
        raise RuntimeError("read failed")

    monkeypatch.setattr(UsageStore, "cost_since", broken)
    closed.clear()
    with pytest.raises(RuntimeError, match="read failed"):
        check_budgets(h)
    assert sorted(closed) == ["MessageQueue", "UsageStore"]


# run_checks: what runs, in which order, with what


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every check run_checks calls, each giving a finding named after it; ``calls``
    records what each was given."""
    import orchestrator.service.swarmcheck as swarmcheck

    state: dict[str, Any] = {"calls": [], "client": object(), "image": OK}
    calls = state["calls"]

    def one(name: str) -> Any:
        def check(*args: Any) -> Check:
            calls.append((name, args))
            return Check(name, OK, "")

        return check

    def many(name: str) -> Any:
        def check(*args: Any) -> list[Check]:
            calls.append((name, args))
            return [Check(f"{name} 1", OK, ""), Check(f"{name} 2", OK, "")]

        return check

    for name in ("check_home", "check_queue", "check_daemon"):
        monkeypatch.setattr(doctor, name, one(name))
    for name in (
        "check_disk",
        "check_providers",
        "check_channels",
        "check_transcription",
        "check_groups",
        "check_web",
        "check_budgets",
        "check_histories",
        "check_containers",
    ):
        monkeypatch.setattr(doctor, name, many(name))
    monkeypatch.setattr(swarmcheck, "check_swarm", many("check_swarm"))

    def engine() -> tuple[Check, Any]:
        calls.append(("check_engine", ()))
        return Check("check_engine", OK, ""), state["client"]

    def image(client: Any, repository: str) -> Check:
        calls.append(("check_image", (client, repository)))
        return Check("check_image", state["image"], "")

    monkeypatch.setattr(doctor, "check_engine", engine)
    monkeypatch.setattr(doctor, "check_image", image)
    return state


def names(checks: list[Check]) -> list[str]:
    return [c.name for c in checks]


EVERY = [
    "check_home",
    "config",
    "check_queue",
    "check_disk 1",
    "check_disk 2",
    "check_providers 1",
    "check_providers 2",
    "check_channels 1",
    "check_channels 2",
    "check_transcription 1",
    "check_transcription 2",
    "check_groups 1",
    "check_groups 2",
    "check_web 1",
    "check_web 2",
    "check_budgets 1",
    "check_budgets 2",
    "check_histories 1",
    "check_histories 2",
    "check_engine",
    "check_image",
    "check_containers 1",
    "check_containers 2",
    "check_daemon",
]


def test_every_check_in_order_each_given_the_home(h: Home, stubbed: dict[str, Any]) -> None:
    checks = run_checks(h)
    assert names(checks) == EVERY
    assert checks[1] == Check("config", OK, "no orchestrator.yaml; using defaults")
    client = stubbed["client"]
    assert stubbed["calls"] == [
        ("check_home", (h,)),
        ("check_queue", (h,)),
        ("check_disk", (h,)),
        ("check_providers", (h,)),
        ("check_channels", (h,)),
        ("check_transcription", (h,)),
        ("check_groups", (h,)),
        ("check_web", (h,)),
        ("check_budgets", (h,)),
        ("check_histories", (h,)),
        ("check_engine", ()),
        ("check_image", (client, "orchestrator-agent")),
        ("check_containers", (h, client)),
        ("check_daemon", (h,)),
    ]


def test_the_config_file_is_named_and_its_image_checked(h: Home, stubbed: dict[str, Any]) -> None:
    config(h, "image: example.org/agent\n")
    checks = run_checks(h)
    assert checks[1] == Check("config", OK, str(h.config_file))
    assert ("check_image", (stubbed["client"], "example.org/agent")) in stubbed["calls"]


def test_an_invalid_config_stops_after_the_home(h: Home, stubbed: dict[str, Any]) -> None:
    config(h, "nope: 1\n")
    [home, failed] = run_checks(h)
    assert home == Check("check_home", OK, "")
    assert (failed.name, failed.status, failed.hint) == ("config", FAIL, "")
    assert failed.detail.startswith(f"{h.config_file}:1: nope: unknown key; valid keys here: ")
    assert stubbed["calls"] == [("check_home", (h,))]


def test_a_config_refusal_keeps_its_hint(
    h: Home, stubbed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_HTTP_TOKEN", "short")
    assert run_checks(h) == [
        Check("check_home", OK, ""),
        Check(
            "config",
            FAIL,
            "ORCHESTRATOR_HTTP_TOKEN is 5 characters; the HTTP API needs a token of 16 or more",
            "use a long random token, such as: openssl rand -hex 24",
        ),
    ]


def test_an_image_not_ok_skips_the_containers(h: Home, stubbed: dict[str, Any]) -> None:
    for status in (WARN, FAIL):
        stubbed["image"] = status
        stubbed["calls"].clear()
        checks = run_checks(h)
        assert names(checks) == [n for n in EVERY if not n.startswith("check_containers")]
        assert "check_containers" not in [name for name, _ in stubbed["calls"]]


HTTP_WARNING = ("serve it to others only through a TLS reverse proxy (see the README)",)


@pytest.mark.parametrize(
    ("http", "warned"),
    [
        ("listen: 0.0.0.0:8080\n  allow_remote: true\n  token: " + "t" * 20, "0.0.0.0:8080"),
        (
            "listen: '[2001:db8::1]:8080'\n  allow_remote: true\n  token: " + "t" * 20,
            "[2001:db8::1]:8080",
        ),
        (
            "listen: 'example.org:8080'\n  allow_remote: true\n  token: " + "t" * 20,
            "example.org:8080",
        ),
        (
            "listen: 'localhostX:8080'\n  allow_remote: true\n  token: " + "t" * 20,
            "localhostX:8080",
        ),
        ("listen: '[::1]:8080'\n  allow_remote: true\n  token: " + "t" * 20, None),
        ("listen: 127.0.0.1:8080\n  allow_remote: true\n  token: " + "t" * 20, None),
        ("listen: localhost:8080\n  allow_remote: true\n  token: " + "t" * 20, None),
        ("listen: 127.0.0.1:8080\n  token: " + "t" * 20, None),
        ("listen: 0.0.0.0:8080\n  allow_remote: true", None),
    ],
)
def test_an_api_open_to_others_without_tls_is_a_warning(
    h: Home, stubbed: dict[str, Any], http: str, warned: str | None
) -> None:
    config(h, f"http:\n  {http}\n")
    checks = run_checks(h)
    if warned is None:
        assert names(checks) == EVERY
    else:
        assert names(checks) == [*EVERY[:2], "http", *EVERY[2:]]
        assert checks[2] == Check(
            "http", WARN, f"the API listens on {warned} without TLS", *HTTP_WARNING
        )


def test_swarm_checks_run_on_swarm_with_an_engine(
    h: Home, stubbed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.config import load_config

    real = load_config(h)
    swarm = SimpleNamespace(
        http_token=None, image=real.image, runtime=SimpleNamespace(backend="swarm")
    )
    monkeypatch.setattr(doctor, "load_config", lambda home: swarm)
    checks = run_checks(h)
    at = EVERY.index("check_image") + 1
    assert names(checks) == [*EVERY[:at], "check_swarm 1", "check_swarm 2", *EVERY[at:]]
    client = stubbed["client"]
    assert ("check_swarm", (h, swarm, client)) in stubbed["calls"]
    stubbed["client"] = None
    stubbed["calls"].clear()
    assert names(run_checks(h)) == EVERY
    assert "check_swarm" not in [name for name, _ in stubbed["calls"]]


def test_a_token_without_remote_listening_allowed_is_no_warning(
    h: Home, stubbed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.config import load_config

    real = load_config(h)
    for token, remote in (("t" * 20, False), (None, True), ("", True)):
        given = SimpleNamespace(
            http_token=token,
            http_allow_remote=remote,
            http_listen="0.0.0.0:8080",
            image=real.image,
            runtime=real.runtime,
        )
        monkeypatch.setattr(doctor, "load_config", lambda home, given=given: given)
        assert names(run_checks(h)) == EVERY

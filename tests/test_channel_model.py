"""The channel model's pure parts: reply splitting and Markdown rendering, bindings and
pairings in the queue's database, account configuration, redaction, the CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.channels.chatapp.core import SenderRate
from orchestrator.channels.chatapp.files import inbox_name, shown_name
from orchestrator.channels.textfmt import markdown_to_html, split_message, utf16_len
from orchestrator.cli import cli
from orchestrator.config import load_config
from orchestrator.errors import BadInput, InvalidConfig
from orchestrator.home import Home
from orchestrator.redact import RedactingFilter, redact, register_secret
from orchestrator.store.chats import ChatStore, normalize_code, parse_chat_ref
from orchestrator.store.messages import open_queue

# splitting and rendering


def test_a_short_text_is_one_piece() -> None:
    assert split_message("hello\n\nworld", 4096) == ["hello\n\nworld"]


def test_splits_prefer_paragraphs_then_lines_then_spaces() -> None:
    text = "a" * 30 + "\n\n" + "b" * 30
    assert split_message(text, 40) == ["a" * 30, "b" * 30]
    text = "a" * 30 + "\n" + "b" * 30
    assert split_message(text, 40) == ["a" * 30, "b" * 30]
    assert split_message("aaaa " * 10, 24) == [
        "aaaa aaaa aaaa aaaa",
        "aaaa aaaa aaaa aaaa",
        "aaaa aaaa",
    ]
    assert split_message("x" * 50, 20) == ["x" * 16, "x" * 16, "x" * 18]


def test_emoji_count_twice_and_are_never_cut_in_half() -> None:
    text = "😀" * 30
    pieces = split_message(text, 20)
    assert all(utf16_len(p) <= 20 for p in pieces)
    assert "".join(pieces) == text


def test_a_code_fence_cut_in_two_is_closed_and_opened_again() -> None:
    text = "```python\n" + "\n".join(f"line = {i}" for i in range(20)) + "\n```"
    pieces = split_message(text, 80)
    assert len(pieces) > 1
    assert all(p.count("```") % 2 == 0 for p in pieces)
    assert pieces[1].startswith("```python\n")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=600), st.integers(min_value=16, max_value=200))
def test_every_piece_is_within_the_limit_and_no_word_is_lost(text: str, limit: int) -> None:
    pieces = split_message(text, limit)
    assert all(utf16_len(p) <= limit for p in pieces)
    if "```" not in text:
        assert "".join(text.split()) == "".join("".join(pieces).split())


def test_markdown_renders_and_everything_else_is_escaped() -> None:
    assert markdown_to_html("**b** *i* _i2_ ~~s~~ `c<d>`") == (
        "<b>b</b> <i>i</i> <i>i2</i> <s>s</s> <code>c&lt;d&gt;</code>"
    )
    assert markdown_to_html("# Title\n<script>&") == "<b>Title</b>\n&lt;script&gt;&amp;"
    assert markdown_to_html("snake_case_name and 2*3*4") == "snake_case_name and 2*3*4"
    assert markdown_to_html('[x](https://a.b/?q="1")') == (
        '<a href="https://a.b/?q=&quot;1&quot;">x</a>'
    )
    assert markdown_to_html("[x](javascript:alert(1))") == "[x](javascript:alert(1))"
    assert markdown_to_html("```sh\nrm -rf <x>\n```") == (
        '<pre><code class="language-sh">rm -rf &lt;x&gt;</code></pre>'
    )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_rendered_html_never_has_a_tag_the_renderer_did_not_make(text: str) -> None:
    from tests.faketelegram import html_problem

    assert html_problem(markdown_to_html(text)) is None


# attachments' names


def test_an_inbox_name_takes_nothing_from_the_senders_name_but_a_clean_extension() -> None:
    name = inbox_name(0, "../../etc/passwd\n.PDF", None, "bin")
    assert name.startswith("19700101-000000-") and name.endswith(".pdf")
    assert "/" not in name and ".." not in name
    assert inbox_name(0, "evil.p/hp", "image/png", "bin").endswith(".png")
    assert inbox_name(0, None, None, "jpg").endswith(".jpg")
    assert inbox_name(0, "x.toolongextension", None, "bin").endswith(".bin")
    assert shown_name('a"b\x00\nc') == '"a\\"bc"'


def test_a_sender_over_the_rate_is_told_once_until_it_is_under_again() -> None:
    rate = SenderRate(2, 10)
    assert rate.check("g", "s", 0) == (True, False)
    assert rate.check("g", "s", 1) == (True, False)
    assert rate.check("g", "s", 2) == (False, True)
    assert rate.check("g", "s", 3) == (False, False)
    assert rate.check("g", "other", 3) == (True, False)
    assert rate.wait("g", "s", 3) == 7
    assert rate.check("g", "s", 10.5) == (True, False)
    assert rate.check("g", "s", 11.5) == (True, False)
    assert rate.check("g", "s", 12) == (False, True)


# bindings and pairings


@pytest.fixture
def chats(home: Path) -> ChatStore:
    return ChatStore(open_queue(Home(home)))


def test_a_chat_is_bound_to_one_group(chats: ChatStore) -> None:
    chats.bind("bot", "1", "fam", activation="always", trust="guest")
    with pytest.raises(BadInput, match="chat bot:1 is bound to group 'fam'; a chat is bound"):
        chats.bind("bot", "1", "work")
    again = chats.bind("bot", "1", "fam", activation="mention")
    assert (again.activation, again.trust) == ("mention", "member")
    assert chats.bound_trust("fam", "bot", "1") == "member"
    assert chats.bound_trust("fam", None, "1") == "member"
    assert chats.bound_trust("work", None, "1") is None
    with pytest.raises(BadInput, match="trust 'creator': expected one of member, guest"):
        chats.bind("bot", "2", "fam", trust="creator")
    with pytest.raises(BadInput, match="activation 'sometimes'"):
        chats.bind("bot", "2", "fam", activation="sometimes")
    assert chats.unbind("bot", "1") is not None and chats.binding("bot", "1") is None


def test_pending_codes_are_capped_per_account_and_one_per_chat(chats: ChatStore) -> None:
    made = [
        chats.request_pairing("bot", str(i), title=None, requested_by=None, cap=3, now=100.0)
        for i in range(4)
    ]
    assert [fresh for _, fresh in made] == [True, True, True, False]
    assert made[3][0] is None
    again, fresh = chats.request_pairing("bot", "0", title=None, requested_by=None, now=200.0)
    assert not fresh and again == made[0][0]
    # Another account has its own cap; an expired code frees a place and gets a new one.
    assert chats.request_pairing("other", "0", title=None, requested_by=None, cap=3)[1]
    later = 100.0 + 3601
    renewed, fresh = chats.request_pairing("bot", "0", title=None, requested_by=None, now=later)
    assert fresh and renewed is not None and renewed.code != made[0][0].code  # type: ignore[union-attr]


def test_a_chat_that_moved_keeps_its_binding_and_code(chats: ChatStore) -> None:
    chats.bind("bot", "-5", "fam")
    pairing, _ = chats.request_pairing("bot", "-6", title=None, requested_by=None)
    assert chats.move_chat("bot", "-5", "-1005")
    assert chats.binding("bot", "-1005") is not None and chats.binding("bot", "-5") is None
    chats.move_chat("bot", "-6", "-1006")
    assert pairing is not None
    assert chats.approve(pairing.code, "fam").chat == "-1006"


def test_codes_and_chat_refs_are_checked() -> None:
    assert normalize_code("abcd2345") == "ABCD-2345"
    assert normalize_code(" abcd-2345 ") == "ABCD-2345"
    for bad in ("ABCD-234", "ABCD-23O5", ""):
        with pytest.raises(BadInput, match="is not a pairing code"):
            normalize_code(bad)
    assert parse_chat_ref("bot:-100123") == ("bot", "-100123")
    assert parse_chat_ref("bot:!room:example.org") == ("bot", "!room:example.org")
    for bad in ("bot", "Bot:1", "bot:", "bot:a b"):
        with pytest.raises(BadInput):
            parse_chat_ref(bad)


def test_an_update_is_queued_once(chats: ChatStore) -> None:
    fields = dict(
        group="fam",
        session="s",
        chat="1",
        thread=None,
        sender="telegram:1",
        trust="member",
        text="hi",
        channel="telegram:bot",
    )
    first = chats.queue.enqueue(**fields, claim=chats.inbound_claim("bot", "7", "1", "70"))  # type: ignore[arg-type]
    second = chats.queue.enqueue(**fields, claim=chats.inbound_claim("bot", "7", "1", "70"))  # type: ignore[arg-type]
    assert second.id == first.id
    assert chats.queue.read("SELECT COUNT(*) FROM messages") == [(1,)]
    assert chats.inbound_of(first.id) == ("1", "70")
    assert chats.was_queued("bot", "7") and not chats.was_queued("other", "7")


def test_a_reply_is_claimed_once_and_unconfirmed_claims_become_unknown(chats: ChatStore) -> None:
    assert chats.claim_send("m", 0, "bot")
    assert not chats.claim_send("m", 0, "bot")
    chats.release_send("m", 0)
    assert chats.claim_send("m", 0, "bot")
    assert chats.claim_send("m", 1, "bot")
    chats.finish_send("m", 1, "sent", platform_ids=["5", "6"])
    assert chats.unconfirmed("bot") == [("m", 0)]
    assert chats.sent("m") == {0: ("unknown", []), 1: ("sent", ["5", "6"])}
    assert chats.prune(now=10**12) == 2


# configuration


def test_channel_accounts_are_validated_with_the_key_named(home: Path) -> None:
    cases = {
        "channels:\n  b:\n    kind: telegram\n": "give token_env or token_secret",
        "channels:\n  b:\n    kind: irc\n    token_env: X\n": "kind",
        "channels:\n  B:\n    kind: telegram\n    token_env: X\n": "channel account names",
        "channels:\n  b:\n    kind: telegram\n    token_env: X\n    api_url: ftp://x\n": "api_url",
        "channels:\n  b:\n    kind: telegram\n    token_env: X\n    colour: red\n": "colour",
        "channels:\n  b:\n    kind: telegram\n    token_env: X\n"
        "    sender_rate: {messages: 5, per: 2d}\n": "expected a duration from 1s to 1d",
    }
    for text, expected in cases.items():
        (home / "orchestrator.yaml").write_text(text)
        with pytest.raises(InvalidConfig, match=expected):
            load_config(Home(home))
    (home / "orchestrator.yaml").write_text(
        "channels:\n  b:\n    kind: telegram\n    token_secret: tg\n    api_url: http://h:1/\n"
        "    attachments_max_bytes: 1m\n    sender_rate: {messages: 5, per: 1m}\n"
    )
    account = load_config(Home(home)).channel_accounts["b"]
    assert (account.options.api_url, account.options.attachments_max_bytes) == (
        "http://h:1",
        1024**2,
    )
    assert (account.rate_messages, account.rate_seconds, account.channel) == (5, 60, "telegram:b")


def test_redaction_covers_messages_arguments_and_tracebacks() -> None:
    secret = "987654:SECRET-token-value"
    register_secret(secret)
    assert redact(f"url https://x/bot{secret}/getMe") == "url https://x/bot[redacted]/getMe"
    record = logging.LogRecord("n", logging.INFO, "f", 1, "calling %s", (f"/bot{secret}/x",), None)
    try:
        raise RuntimeError(f"failed at {secret}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    assert secret not in record.getMessage() and secret not in (record.exc_text or "")
    register_secret("short")  # too short to redact safely: ignored
    assert redact("a short word") == "a short word"


# the CLI


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    return result.exit_code, result.output


def test_channel_bind_and_pair_commands(home: Path) -> None:
    assert run(home, "group", "add", "fam")[0] == 0
    code, out = run(home, "channel", "add", "telegram", "bot", "--token-env", "TG")
    assert code == 0 and "channel account bot (telegram, token: env TG)" in out
    code, out = run(home, "channel", "add", "telegram", "bot2")
    assert code == 2 and "give --token-env VAR or --token-secret NAME" in out
    code, out = run(home, "bind", "fam", "bot:-100", "--activation", "always", "--trust", "guest")
    assert code == 0 and "bound bot:-100 to group fam (activation always" in out
    code, out = run(home, "bind", "fam", "nobot:1")
    assert code == 2 and "no channel account 'nobot' (defined: bot)" in out
    code, out = run(home, "group", "show", "fam", "--json")
    assert json.loads(out)["bindings"][0]["chat"] == "-100"
    listing = json.loads(run(home, "channel", "list", "--json")[1])
    assert listing[0]["token"] == "env TG" and listing[0]["bindings"][0]["trust"] == "guest"
    queue = open_queue(Home(home))
    pairing, _ = ChatStore(queue).request_pairing("bot", "42", title="Ann", requested_by=None)
    queue.close()
    assert pairing is not None
    code, out = run(home, "pair", "--list")
    assert code == 0 and pairing.code in out and "bot:42" in out
    code, out = run(home, "pair", pairing.code.lower(), "fam", "--trust", "guest")
    assert code == 0 and "paired bot:42 (Ann) with group fam" in out
    code, out = run(home, "pair", pairing.code, "fam")
    assert code == 2 and "was approved already" in out
    code, out = run(home, "channel", "remove", "bot")
    assert code == 2 and "2 chats of 'bot' are bound" in out
    code, out = run(home, "unbind", "bot:42")
    assert code == 0 and "unbound bot:42 from group fam" in out
    code, out = run(home, "channel", "remove", "bot", "--unbind")
    assert code == 0 and "removed channel account bot" in out
    assert json.loads(run(home, "group", "show", "fam", "--json")[1])["bindings"] == []


def test_matrix_transaction_ids_and_relations() -> None:
    from orchestrator.channels.chatapp.core import send_key as txn_id
    from orchestrator.channels.matrix.adapter import notice_content, relation

    assert txn_id("abc", 0, 0) == "orch.abc.0.0"
    assert txn_id("abc", -1, 2) == "orch.abc.m1.2"
    assert txn_id("abc", 1, 0) != txn_id("abc", 0, 1)
    assert relation(None, None) is None
    assert relation(None, "$e") == {"m.in_reply_to": {"event_id": "$e"}}
    assert relation("$root", "$e") == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": "$e"},
    }
    assert relation("$root", None)["is_falling_back"] is True  # type: ignore[index]
    content = notice_content("**hi** <b>", None, "$e")
    assert content["msgtype"] == "m.notice" and content["body"] == "**hi** <b>"
    assert content["formatted_body"] == "<b>hi</b> &lt;b&gt;"


def test_matrix_accounts_are_validated(home: Path) -> None:
    base = "channels:\n  m:\n    kind: matrix\n    token_env: X\n"
    cases = {
        base + "    user_id: '@b:s'\n": "homeserver",
        base + "    homeserver: http://h\n": "user_id",
        base + "    homeserver: http://h\n    user_id: bob\n": "user_id",
        base + "    homeserver: http://h\n    user_id: '@b:s'\n    allow_inviters: [eve]\n": (
            "'eve' is not a Matrix user id"
        ),
        base + "    homeserver: http://h\n    user_id: '@b:s'\n    api_url: http://x\n": "api_url",
    }
    for text, expected in cases.items():
        (home / "orchestrator.yaml").write_text(text)
        with pytest.raises(InvalidConfig, match=expected):
            load_config(Home(home))
    (home / "orchestrator.yaml").write_text(
        base + "    homeserver: http://h:8008/\n    user_id: '@b:s'\n"
        "    allow_inviters: ['@op:s']\n"
    )
    account = load_config(Home(home)).channel_accounts["m"]
    options = account.options
    assert (options.homeserver, options.user_id, options.allow_inviters) == (
        "http://h:8008",
        "@b:s",
        ("@op:s",),
    )
    assert account.to_dict()["allow_inviters"] == ["@op:s"]


def test_channel_add_matrix(home: Path) -> None:
    code, out = run(home, "channel", "add", "matrix", "mx", "--token-env", "T")
    assert code == 2 and "needs --homeserver URL and --user-id" in out
    code, out = run(
        home, "channel", "add", "telegram", "tg", "--token-env", "T", "--user-id", "@b:s"
    )
    assert code == 2 and "--user-id is for matrix accounts, not telegram" in out
    code, out = run(
        home, "channel", "add", "matrix", "mx", "--token-env", "T", "--homeserver",
        "http://127.0.0.1:8008", "--user-id", "@bot:localhost", "--allow-inviter", "@op:localhost",
    )  # fmt: skip
    assert code == 0, out
    listing = json.loads(run(home, "channel", "list", "--json")[1])
    assert listing[0]["user_id"] == "@bot:localhost"
    assert listing[0]["allow_inviters"] == ["@op:localhost"]


def test_a_token_comes_from_the_environment_or_the_secrets_file_and_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from orchestrator.secrets import MissingSecret as MissingToken
    from orchestrator.secrets import SecretRef

    def resolve_token(owner: str, env: str | None, secret: str | None, path: Path | None) -> str:
        return SecretRef(env, secret, "token_env", "token_secret").require(owner, path)

    owner = "channel account 'fam'"
    monkeypatch.setenv("FAM_TOKEN_FOR_TEST", "123:env-token-value")
    assert resolve_token(owner, "FAM_TOKEN_FOR_TEST", None, None) == "123:env-token-value"
    assert redact("sent 123:env-token-value") == "sent [redacted]"
    monkeypatch.delenv("FAM_TOKEN_FOR_TEST")
    with pytest.raises(MissingToken) as caught:
        resolve_token(owner, "FAM_TOKEN_FOR_TEST", None, None)
    assert caught.value.message == (
        "channel account 'fam': environment variable FAM_TOKEN_FOR_TEST is not set"
    )
    assert caught.value.hint == "export FAM_TOKEN_FOR_TEST=... for the daemon, or use token_secret"
    with pytest.raises(MissingToken) as caught:
        resolve_token(owner, None, "fam", None)
    assert caught.value.message == (
        "channel account 'fam' names secret 'fam' but no secrets_file is configured"
    )
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("fam: 456:file-token-value\n")
    os.chmod(secrets, 0o600)
    assert resolve_token(owner, None, "fam", secrets) == "456:file-token-value"
    assert redact("sent 456:file-token-value") == "sent [redacted]"
    with pytest.raises(MissingToken, match=f"^channel account 'fam': {secrets} has no entry 'x'$"):
        resolve_token(owner, None, "x", secrets)
    with pytest.raises(MissingToken, match="names neither token_env nor token_secret"):
        resolve_token(owner, None, None, secrets)


def test_no_bridge_token_may_name_the_prefix_of_any_kind(home: Path) -> None:
    """Each kind registers its prefix; a bridge token naming one is refused with the
    prefix to rename it to."""
    from orchestrator.config.kinds import account_kinds

    kinds = account_kinds()
    assert {"telegram", "matrix", "slack", "discord"} <= set(kinds)
    for kind in kinds.values():
        (home / "orchestrator.yaml").write_text(
            f"http:\n  tokens:\n    b:\n      token_env: X\n      senders: '{kind.prefix}'\n"
        )
        with pytest.raises(InvalidConfig, match=f"such as '{kind.name}-bridge:'"):
            load_config(Home(home))

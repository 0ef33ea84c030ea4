"""Chat text word for word: replies split at a length limit (orchestrator/channels/
textfmt.py), Markdown as Telegram HTML and as Slack mrkdwn, Slack's text as plain text
(orchestrator/channels/slack/mrkdwn.py), and the bot's mention taken off the front of
what a person said (orchestrator/channels/chatapp/mention.py). The exact strings are the
behaviour: each table pairs an input with its output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.channels import textfmt
from orchestrator.channels.chatapp.mention import strip_mention
from orchestrator.channels.slack import mrkdwn
from orchestrator.channels.slack.mrkdwn import markdown_to_mrkdwn, mrkdwn_pieces, slack_to_text
from orchestrator.channels.textfmt import markdown_to_html, split_message
from orchestrator.confined import UnsafePath
from orchestrator.memory import okf, reading, roletext
from orchestrator.memory.okf import Frontmatter

HTML = [
    ("\"a\" **b** 'c'", "\"a\" <b>b</b> 'c'"),
    ("`\"x\" 'y'`", "<code>\"x\" 'y'</code>"),
    ("```\n\"q\" 'r' <s>\n```", "<pre>\"q\" 'r' &lt;s&gt;</pre>"),
    ('[a "b"](https://e.com)', '<a href="https://e.com">a "b"</a>'),
    ("plain & <b> \"q\" 'a'", "plain &amp; &lt;b&gt; \"q\" 'a'"),
    ("`a<b>`", "<code>a&lt;b&gt;</code>"),
    ("``", "``"),
    ("`a\nb`", "`a\nb`"),
    ('[x](https://e.com/?a=1&b="2")', '<a href="https://e.com/?a=1&amp;b=&quot;2&quot;">x</a>'),
    ("[x](ftp://e.com)", "[x](ftp://e.com)"),
    ("[x y](http://e.com) z", '<a href="http://e.com">x y</a> z'),
    ("[**b**](https://e.com)", '<a href="https://e.com"><b>b</b></a>'),
    ("**bold**", "<b>bold</b>"),
    ("** b**", "<b> b</b>"),
    ("**a*b**", "**a*b**"),
    ("__b__", "<b>b</b>"),
    ("*it*", "<i>it</i>"),
    ("a*b*c", "a*b*c"),
    ("*a*b", "*a*b"),
    ("* a*", "* a*"),
    ("_it_", "<i>it</i>"),
    ("snake_case_name", "snake_case_name"),
    ("_a_b", "_a_b"),
    ("~~s~~", "<s>s</s>"),
    ("~~**x**~~", "<s><b>x</b></s>"),
    ("**_x_**", "<b><i>x</i></b>"),
    ("# H", "<b>H</b>"),
    ("###### H6", "<b>H6</b>"),
    ("####### H7", "####### H7"),
    ("#H", "#H"),
    ("##  spaced *i*", "<b>spaced <i>i</i></b>"),
    ("```\na<b\n```", "<pre>a&lt;b</pre>"),
    ("```py\nx = 1\n```\nafter", '<pre><code class="language-py">x = 1</code></pre>\nafter'),
    ("  ```  \ncode\n  ```  ", "<pre>code</pre>"),
    ("```\nunclosed\nmore", "<pre>unclosed\nmore</pre>"),
    ("```c++\nx\n```", '<pre><code class="language-c++">x</code></pre>'),
    ("```a b\nx\n```", "```a b\nx\n<pre></pre>"),
    ("x\n```\n```", "x\n<pre></pre>"),
    ("a\n\nb", "a\n\nb"),
    ("*a* and *b*", "<i>a</i> and <i>b</i>"),
    ("**a** **b**", "<b>a</b> <b>b</b>"),
    ("~~a~~~~b~~", "<s>a</s><s>b</s>"),
    ("__a__b", "<b>a</b>b"),
    ("**\n**", "**\n**"),
    ("_a\nb_", "_a\nb_"),
    ("*a\nb*", "*a\nb*"),
    ("` `", "<code> </code>"),
    ("x_y_ z", "x_y_ z"),
    ("(_a_)", "(<i>a</i>)"),
    ("*_a_*", "<i><i>a</i></i>"),
    ("**a**b", "<b>a</b>b"),
]

MRKDWN = [
    ("plain & <b> \"q\" 'a'", "plain &amp; &lt;b&gt; \"q\" 'a'"),
    ("`a<b>`", "`a&lt;b&gt;`"),
    ("``", "``"),
    ("`a\nb`", "`a\nb`"),
    ('[x](https://e.com/?a=1&b="2")', '<https://e.com/?a=1&amp;b="2"|x>'),
    ("[x](ftp://e.com)", "[x](ftp://e.com)"),
    ("[x y](http://e.com) z", "<http://e.com|x y> z"),
    ("[**b**](https://e.com)", "<https://e.com|**b**>"),
    ("**bold**", "*bold*"),
    ("** b**", "* b*"),
    ("**a*b**", "**a*b**"),
    ("__b__", "*b*"),
    ("*it*", "_it_"),
    ("a*b*c", "a*b*c"),
    ("*a*b", "*a*b"),
    ("* a*", "• a*"),
    ("_it_", "_it_"),
    ("snake_case_name", "snake_case_name"),
    ("_a_b", "_a_b"),
    ("~~s~~", "~s~"),
    ("~~**x**~~", "~*x*~"),
    ("**_x_**", "*_x_*"),
    ("# H", "*H*"),
    ("###### H6", "*H6*"),
    ("####### H7", "####### H7"),
    ("#H", "#H"),
    ("##  spaced *i*", "*spaced _i_*"),
    ("```\na<b\n```", "```\na&lt;b\n```"),
    ("```py\nx = 1\n```\nafter", "```\nx = 1\n```\nafter"),
    ("  ```  \ncode\n  ```  ", "```\ncode\n```"),
    ("```\nunclosed\nmore", "```\nunclosed\nmore\n```"),
    ("```c++\nx\n```", "```\nx\n```"),
    ("```a b\nx\n```", "```a b\nx\n```\n\n```"),
    ("x\n```\n```", "x\n```\n\n```"),
    ("a\n\nb", "a\n\nb"),
    ("*a* and *b*", "_a_ and _b_"),
    ("**a** **b**", "*a* *b*"),
    ("~~a~~~~b~~", "~a~~b~"),
    ("__a__b", "*a*b"),
    ("**\n**", "**\n**"),
    ("_a\nb_", "_a\nb_"),
    ("*a\nb*", "*a\nb*"),
    ("` `", "` `"),
    ("x_y_ z", "x_y_ z"),
    ("(_a_)", "(_a_)"),
    ("*_a_*", "__a__"),
    ("**a**b", "*a*b"),
    ("- a", "• a"),
    ("* b", "• b"),
    ("+ c", "• c"),
    ("  - nested", "  • nested"),
    ("-a", "-a"),
    ("- ", "• "),
    ("1. x", "1. x"),
    ("a <@U1> & <!here>", "a &lt;@U1&gt; &amp; &lt;!here&gt;"),
    ("[a|b](https://e.com/x>y)", "<https://e.com/x&gt;y|a❘b>"),
    ("```\n<@U1>\n```", "```\n&lt;@U1&gt;\n```"),
    ("# a <b>", "*a &lt;b&gt;*"),
    ("\t* tab", "\t• tab"),
]

FROM_SLACK = [
    ("<@U123>", "@U123"),
    ("<@U123|bob>", "@bob"),
    ("<#C1|general>", "#general"),
    ("<#C1>", "#C1"),
    ("<!here>", "@here"),
    ("<!subteam^S1|@team>", "@team"),
    ("<!subteam^S1>", "@subteam"),
    ("<!date^123^{x}|Jan 1>", "Jan 1"),
    ("<https://x|label>", "label (https://x)"),
    ("<https://x>", "https://x"),
    ("<https://x|https://x>", "https://x"),
    ("a &lt;b&gt; &amp;lt;", "a <b> &lt;"),
    ("<>", ""),
    ("<a\nb>", "<a\nb>"),
    ("<<@U1>>", "<@U1>"),
    ("<mailto:a@b|a@b>", "a@b (mailto:a@b)"),
    ("x <@U1> y <#C2|gen> z", "x @U1 y #gen z"),
]

MENTIONS = [
    ("@helperbot what?", "what?"),
    ("@HelperBot: hi", "hi"),
    ("@helperbot, hi", "hi"),
    ("@helperbot2 hi", "@helperbot2 hi"),
    ("@helperbot_x", "@helperbot_x"),
    ("@helperbot-x", "@helperbot-x"),
    ("@helperbot.x", "@helperbot.x"),
    ("helperbot hi", "hi"),
    ("Helper: hi", "hi"),
    ("  @helperbot   hi", "hi"),
    ("@helperbot", "@helperbot"),
    ("@helperbot  ", "@helperbot  "),
    ("/clear@helperbot", "/clear"),
    ("/clear@HelperBot now", "/clear now"),
    ("/clear@other", "/clear@other"),
    ("@helperbot /clear@helperbot", "/clear"),
    ("/clear@helperbot2", "/clear@helperbot2"),
    ("/Clear_1@helperbot", "/Clear_1"),
    ("/1x@helperbot", "/1x@helperbot"),
    ("/clear@helperbot.", "/clear@helperbot."),
    ("hi @helperbot", "hi @helperbot"),
    ("@helperbot:hi", "hi"),
    ("@helperbot ,hi", ",hi"),
    ("@helperbot:: hi", ": hi"),
    ("Helperbot hi", "hi"),
    ("@helperbotx", "@helperbotx"),
    ("@help", "@help"),
    ("@helperbot!hi", "!hi"),
    ("/clear@helperbot\tnow", "/clear\tnow"),
    ("/" + "a" * 32 + "@helperbot", "/" + "a" * 32),
    ("/" + "a" * 33 + "@helperbot", "/" + "a" * 33 + "@helperbot"),
    ("helper, hi", "hi"),
    ("Helperb hi", "Helperb hi"),
]


@pytest.mark.parametrize(("text", "expected"), HTML)
def test_markdown_as_telegram_html(text: str, expected: str) -> None:
    assert markdown_to_html(text) == expected


@pytest.mark.parametrize(("text", "expected"), MRKDWN)
def test_markdown_as_slack_mrkdwn(text: str, expected: str) -> None:
    assert markdown_to_mrkdwn(text) == expected


@pytest.mark.parametrize(("text", "expected"), FROM_SLACK)
def test_slack_text_as_plain_text(text: str, expected: str) -> None:
    assert slack_to_text(text) == expected


@pytest.mark.parametrize(("text", "expected"), MENTIONS)
def test_the_mention_taken_off(text: str, expected: str) -> None:
    assert strip_mention(text, ["@helperbot", "helperbot", "Helper"]) == expected


# lengths and cuts


def test_lengths_are_utf16_units() -> None:
    assert textfmt.utf16_len("") == 0
    assert textfmt.utf16_len("a\u00e9\u4e2d") == 3
    assert textfmt.utf16_len("a\U0001f600") == 3
    assert textfmt.utf16_len("\uffff\U00010000") == 3


def test_a_hard_cut_never_halves_a_character() -> None:
    assert textfmt._hard_cut("ab\U0001f600cd", 2) == ("ab", "\U0001f600cd")
    assert textfmt._hard_cut("ab\U0001f600cd", 3) == ("ab", "\U0001f600cd")
    assert textfmt._hard_cut("ab\U0001f600cd", 4) == ("ab\U0001f600", "cd")
    assert textfmt._hard_cut("ab\uffffcd", 3) == ("ab\uffff", "cd")
    assert textfmt._hard_cut("a\U00010000", 2) == ("a", "\U00010000")
    assert textfmt._hard_cut("a\U00010000", 3) == ("a\U00010000", "")
    assert textfmt._hard_cut("abc", 3) == ("abc", "")
    assert textfmt._hard_cut("abc", 2) == ("ab", "c")
    assert textfmt._hard_cut("", 0) == ("", "")


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("aaaa bbbb\ncccc\n\ndddd", 12, ("aaaa bbbb", "cccc\n\ndddd")),
        ("aaaa bbbb\ncccc\n\ndddd", 16, ("aaaa bbbb\ncccc", "dddd")),
        ("aaaa bbbb\ncccc dddd", 16, ("aaaa bbbb", "cccc dddd")),
        ("aaaa bbbb", 7, ("aaaa", "bbbb")),
        ("aaaaaaaa", 4, ("aaaa", "aaaa")),
        (" aaaaaaa", 4, (" aaa", "aaaa")),
        ("\n\naaaaaa", 4, ("\n", "aaaaaa")),
        ("abc", 3, ("abc", "")),
        ("a\n\n\nb", 3, ("a", "\nb")),
        ("ab\ncd ef", 6, ("ab", "cd ef")),
    ],
)
def test_a_cut_prefers_a_paragraph_then_a_line_then_a_space(
    text: str, limit: int, expected: tuple[str, str]
) -> None:
    assert textfmt._cut(text, limit) == expected


def test_the_patterns() -> None:
    assert textfmt.FENCE == "```"
    assert textfmt.HEADING.match("# a") is not None
    assert textfmt.FENCE_OPEN.match(" ```py-3+x ")[1] == "py-3+x"  # type: ignore[index]
    assert textfmt.FENCE_CLOSE.match(" ``` ") is not None
    assert textfmt.FENCE_CLOSE.match("```py") is None


# split_message

CODE8 = "```py\n" + "\n".join(f"line {i}" for i in range(8)) + "\n```\nafter"
LONG_LANGUAGE = "```averyveryverylonglanguagename\n" + "code\n" * 10 + "```"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("\n\nshort\n\n", 16, ["short"]),
        ("x" * 16, 16, ["x" * 16]),
        ("x" * 17, 16, ["x" * 12, "x" * 5]),
        (
            "para one is here\n\npara two is here too",
            20,
            ["para one is", "here", "para two is here too"],
        ),
        ("word " * 10, 16, ["word word"] * 5),
        ("\U0001f600" * 10, 16, ["\U0001f600" * 6, "\U0001f600" * 4]),
        ("\U0001f600" * 8, 16, ["\U0001f600" * 8]),
        ("\U0001f600" * 8 + "a", 16, ["\U0001f600" * 6, "\U0001f600" * 2 + "a"]),
        ("a" * 40, 16, ["a" * 12, "a" * 12, "a" * 16]),
        (
            CODE8,
            30,
            [
                "```py\nline 0\nline 1\n```",
                "```py\nline 2\nline 3\n```",
                "```py\nline 4\nline 5\n```",
                "```py\nline 6\nline 7\n```\nafter",
            ],
        ),
        (
            "intro\n```\n" + "x" * 50 + "\n```",
            30,
            [
                "intro\n```\n" + "x" * 16 + "\n```",
                "```\n" + "x" * 22 + "\n```",
                "```\n" + "x" * 12 + "\n```",
            ],
        ),
        (
            LONG_LANGUAGE,
            40,
            [
                "```averyveryverylonglanguagename\ncod\n```",
                "```averyvery\ne\ncode\ncode\ncode\ncode\n```",
                "```averyvery\ncode\ncode\ncode\ncode\n```",
                "```averyvery\ncode\n```",
            ],
        ),
        ("text\n\n```\n", 16, ["text\n\n```"]),
        (
            "a b c d e f g h i j k l m n o p q r s t",
            16,
            ["a b c d e f", "g h i j k l", "m n o p q r s t"],
        ),
        (
            "line1\nline2\nline3\nline4\nline5\nline6",
            16,
            ["line1\nline2", "line3\nline4", "line5\nline6"],
        ),
        ("  \n\n   \n\nabc", 16, ["  \n\n   \n\nabc"]),
        ("x" * 20 + "\n\n   \n\n" + "y" * 5, 20, ["x" * 16, "xxxx\n\n   \n\nyyyyy"]),
        (
            "1234567890123 ```py\ncode code code code",
            20,
            ["1234567890123", "```py\ncode code \n```", "```py\ncode code"],
        ),
    ],
)
def test_split_message(text: str, limit: int, expected: list[str]) -> None:
    assert split_message(text, limit) == expected


def test_split_message_of_nothing_and_of_too_small_a_limit() -> None:
    assert split_message("", 16) == []
    assert split_message("\n\n\n", 16) == []
    assert split_message("x", 16) == ["x"]
    with pytest.raises(ValueError, match=r"^limit must be at least 16$"):
        split_message("x", 15)


def test_every_piece_fits_and_the_fences_balance() -> None:
    text = "intro\n\n```python\n" + "\n".join(f"print({i})" for i in range(60)) + "\n```\n\nend"
    for limit in (16, 17, 40, 100):
        pieces = split_message(text, limit)
        assert all(textfmt.utf16_len(p) <= limit for p in pieces)
        assert all(p.count("```") % 2 == 0 for p in pieces)


# Slack pieces


def test_mrkdwn_pieces() -> None:
    assert mrkdwn.SLACK_TEXT_MAX == 4000
    assert mrkdwn_pieces("x" * 50) == ["x" * 50]
    assert mrkdwn_pieces("a & b " * 10, 30) == [
        "a &amp; b a &amp; b a &amp;",
        "b a &amp; b a",
        "&amp; b a &amp; b a &amp; b",
        "a &amp; b a &amp;",
        "b a &amp; b",
    ]
    assert mrkdwn_pieces("<<<<<<<<<< <<<<<<<<<<", 40) == ["&lt;" * 10, "&lt;" * 10]
    assert mrkdwn_pieces("<" * 30, 64) == ["&lt;" * 14, "&lt;" * 10, "&lt;" * 6]
    assert mrkdwn_pieces("abc\n\ndef", 40, 20) == ["abc\n\ndef"]
    # a limit under 80 may be too small for 16 characters, the smallest cut: said, not
    # cut again and again
    with pytest.raises(ValueError) as small:
        mrkdwn_pieces("&" * 16, 79)
    assert str(small.value) == (
        f"{'&' * 16!r} renders to 80 characters, over the limit of 79; "
        "a limit of at least 80 fits any text"
    )
    assert mrkdwn.MRKDWN_LIMIT_MIN == 80
    assert mrkdwn_pieces("&" * 16, 80) == ["&amp;" * 16]
    assert mrkdwn_pieces("&" * 17, 80) == ["&amp;" * 12, "&amp;" * 5]
    assert mrkdwn_pieces("&" * 17, 80, 26) == ["&amp;" * 12, "&amp;" * 5]  # 26, 17, 16
    assert mrkdwn_pieces("abc " * 20, 40, 20) == [
        "abc abc abc abc",
        "abc abc abc abc",
        "abc abc abc abc",
        "abc abc abc abc",
        "abc abc abc abc",
    ]
    assert mrkdwn_pieces("**" + "b" * 30 + "**", 20) == ["**" + "b" * 14, "b" * 16 + "**"]


def test_escape_is_the_three_characters() -> None:
    assert mrkdwn.escape("a&b<c>d&amp;") == "a&amp;b&lt;c&gt;d&amp;amp;"


# mentions


def test_the_longest_form_is_tried_first_and_an_empty_form_ignored() -> None:
    assert strip_mention("bot hi", ["bo", "bot"]) == "hi"
    assert strip_mention("bo hi", ["bo", "bot"]) == "hi"
    assert strip_mention("@bot hi", ["", "@bot"]) == "hi"
    assert strip_mention("hi", [""]) == "hi"
    assert strip_mention("@Bot hi", iter(["@bot"])) == "hi"


def test_the_command_takes_the_handle_of_any_form() -> None:
    assert strip_mention("/x@Bot", ["@bot"]) == "/x"
    assert strip_mention("/x@bot", ["bot"]) == "/x"
    assert strip_mention("/x@bot", []) == "/x@bot"
    assert strip_mention("/x@bot", ["@other"]) == "/x@bot"
    assert strip_mention("/x@bot arg", iter(["@bot"])) == "/x arg"
    name = "b" * 64
    assert strip_mention(f"/x@{name}", [name]) == "/x"
    assert strip_mention(f"/x@{name}b", [name + "b"]) == f"/x@{name}b"
    assert strip_mention("/x@a.b-c", ["a.b-c"]) == "/x"


def test_nothing_left_keeps_the_text() -> None:
    assert strip_mention("  @bot  ", ["@bot"]) == "  @bot  "
    assert strip_mention("@bot, ", ["@bot"]) == "@bot, "
    assert strip_mention("@bot x", ["@bot"]) == "x"


# memory: OKF frontmatter (orchestrator/memory/okf.py)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no", Frontmatter("none", None, "", 0)),
        (" ---\n---\n", Frontmatter("none", None, "", 0)),
        ("---x\n---\n", Frontmatter("none", None, "", 0)),
        ("\n---\n---\n", Frontmatter("none", None, "", 0)),
        ("---\na: 1\n---\nbody", Frontmatter("ok", {"a": 1}, "a: 1\n", 13, 4)),
        ("\ufeff---  \r\na: 1\r\n...\r\nbody", Frontmatter("ok", {"a": 1}, "a: 1\r\n", 19, 8)),
        ("---\t\na: 1\n---\t \nb", Frontmatter("ok", {"a": 1}, "a: 1\n", 16, 5)),
        ("---\na: 1\n--- \nb", Frontmatter("ok", {"a": 1}, "a: 1\n", 14, 4)),
        ("---\na: 1\n---", Frontmatter("ok", {"a": 1}, "a: 1\n", 12, 4)),
        ("---\n---\n", Frontmatter("ok", {}, "", 8, 4)),
        ("---\n# c\n---\nx\n---\n", Frontmatter("ok", {}, "# c\n", 12, 4)),
        (
            "---\n",
            Frontmatter("invalid", None, "", 4, 4, "the opening '---' has no closing '---' line"),
        ),
        (
            "---\na: 1\n----\n",
            Frontmatter(
                "invalid",
                None,
                "a: 1\n----\n",
                14,
                4,
                "the opening '---' has no closing '---' line",
            ),
        ),
        (
            "---\na: 1\n x---\n",
            Frontmatter(
                "invalid",
                None,
                "a: 1\n x---\n",
                15,
                4,
                "the opening '---' has no closing '---' line",
            ),
        ),
        (
            "---\n- x\n---\n",
            Frontmatter(
                "invalid", None, "- x\n", 12, 4, "frontmatter is a YAML list, not a mapping"
            ),
        ),
        (
            "---\nplain\n---\n",
            Frontmatter(
                "invalid", None, "plain\n", 14, 4, "frontmatter is a YAML str, not a mapping"
            ),
        ),
    ],
)
def test_split_frontmatter(text: str, expected: Frontmatter) -> None:
    assert okf.split_frontmatter(text) == expected


def test_invalid_yaml_says_its_problem_and_line() -> None:
    got = okf.split_frontmatter("---\na: 1\n\tb\n---\nbody")
    assert (got.status, got.data, got.raw, got.block_end, got.raw_start) == (
        "invalid",
        None,
        "a: 1\n\tb\n",
        16,
        4,
    )
    assert got.error is not None
    assert got.error.endswith(" (frontmatter line 2)")
    assert "\n" not in got.error


def test_a_yaml_error_without_a_mark_gives_its_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    def bad(_raw: str, Loader: object) -> object:
        raise yaml.YAMLError("first line\nsecond line")

    monkeypatch.setattr(yaml, "load", bad)
    got = okf.split_frontmatter("---\na: 1\n---\nb")
    assert got == Frontmatter("invalid", None, "a: 1\n", 13, 4, "first line")


def test_the_fast_safe_loader_is_used_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    seen: list[object] = []
    real = yaml.load

    def load(raw: str, Loader: object) -> object:
        seen.append(Loader)
        return real(raw, Loader=Loader)  # type: ignore[arg-type]

    monkeypatch.setattr(yaml, "load", load)
    assert okf.split_frontmatter("---\na: 1\n---\n").data == {"a": 1}
    assert seen == [getattr(yaml, "CSafeLoader", yaml.SafeLoader)]
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert okf.split_frontmatter("---\na: 1\n---\n").data == {"a": 1}
    assert seen[-1] is yaml.SafeLoader


def test_the_okf_names() -> None:
    assert okf.OKF_VERSION == "0.1"
    assert frozenset({"index.md", "log.md"}) == okf.RESERVED_NAMES
    assert okf.DAILY_DIR == "daily"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("---\ntype: person\n---\n", "person"),
        ("---\ntype: '  place '\n---\n", "place"),
        ("---\ntype: '  '\n---\n", None),
        ("---\ntype: 3\n---\n", None),
        ("---\nname: x\n---\n", None),
        ("no frontmatter", None),
        ("---\n- a\n---\n", None),
    ],
)
def test_concept_type(text: str, expected: str | None) -> None:
    assert okf.concept_type(okf.split_frontmatter(text)) == expected


# memory: reading files for a model (orchestrator/memory/reading.py)

NOTICE = (
    "\n[truncated: memory/index.md is longer than 16,000 characters and only its beginning "
    "was loaded. Slim this file: keep headlines and links here and move the detail into "
    "linked files.]"
)


def agent(tmp_path: Path, files: dict[str, bytes]) -> str:
    root = tmp_path / "agent"
    (root / "memory" / "system").mkdir(parents=True)
    for relative, data in files.items():
        (root / "memory" / relative).write_bytes(data)
    return str(root)


def test_the_reading_constants() -> None:
    assert frozenset({"startup", "clear", "compact"}) == reading.INJECT_SOURCES
    assert reading.INJECTED_FILES == ("index.md", "system/definition.md")
    assert reading._READ_LIMIT_BYTES == 68096


def test_cap_keeps_16000_characters_and_says_so() -> None:
    assert reading.cap("  \n x \n\n", "index.md") == "x"
    assert reading.cap("é" * 16000, "index.md") == "é" * 16000
    assert reading.cap(" " + "é" * 16000 + "\n", "index.md") == "é" * 16000
    assert reading.cap("é" * 16001, "index.md") == "é" * 16000 + NOTICE
    assert reading.cap("x" * 20000, "a/b.md") == "x" * 16000 + NOTICE.replace("index.md", "a/b.md")


def test_render_memory_word_for_word(tmp_path: Path) -> None:
    root = agent(
        tmp_path,
        {"index.md": b"  \n# Index\n- [x](x.md)\n\n", "system/definition.md": b"Doctrine \xff.\n"},
    )
    assert reading.render_memory(root) == (
        "## Memory\n\nYour durable memory is a folder of plain Markdown files at "
        f"{root}/memory/, an Open\nKnowledge Format (OKF) v0.1 bundle. The files on disk are "
        "authoritative: they are what\nyou know, people may edit them directly, and you may "
        "read and edit them with your file\ntools. Below are the map (index.md) and the memory "
        "doctrine (system/definition.md);\nlinks from the index lead to more detailed files, "
        "which you read when they become\nrelevant.\n\n### memory/index.md\n\n# Index\n"
        "- [x](x.md)\n\n### memory/system/definition.md\n\nDoctrine \ufffd.\n"
    )
    for source in ("startup", "clear", "compact"):
        assert reading.session_start_memory(source, root) == reading.render_memory(root)
    for source in ("resume", "", None, "Startup"):
        assert reading.session_start_memory(source, root) == ""


def test_read_injected_says_why_nothing_was_loaded(tmp_path: Path) -> None:
    root = agent(tmp_path, {"index.md": b"x"})
    assert reading.read_injected(str(tmp_path / "none"), "index.md") == (
        "(memory/index.md is missing; nothing was loaded)"
    )
    assert reading.read_injected(root, "system/definition.md") == (
        "(memory/system/definition.md is missing; nothing was loaded)"
    )
    (Path(root) / "memory" / "system" / "definition.md").symlink_to(
        Path(root) / "memory" / "index.md"
    )
    assert reading.read_injected(root, "system/definition.md") == (
        "(memory/system/definition.md was refused: is a symlink, not a regular file; "
        "nothing was loaded)"
    )
    os.mkfifo(Path(root) / "memory" / "fifo.md")
    assert reading.read_injected(root, "fifo.md") == (
        "(memory/fifo.md was refused: is a FIFO, not a regular file; nothing was loaded)"
    )


def test_read_injected_reports_an_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = agent(tmp_path, {"index.md": b"x"})

    def broken(*_: object, **__: object) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(reading.ConfinedDir, "read_bytes", broken)
    assert reading.read_injected(root, "index.md") == (
        "(memory/index.md is unreadable: Input/output error; nothing was loaded)"
    )


def test_read_injected_reads_at_most_its_limit_of_a_larger_file(tmp_path: Path) -> None:
    root = agent(tmp_path, {"index.md": b" " * 68000 + b"y" * 200})
    assert reading.read_injected(root, "index.md") == "y" * 96


# memory_relative and read_lines


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b.md", "a/b.md"),
        ("memory/a/b.md", "a/b.md"),
        ("/workspace/agent/memory/a/b.md", "a/b.md"),
        ("  memory/index.md  ", "index.md"),
        ("./a//b/./c.md", "a/b/c.md"),
        ("memory/memory/x.md", "memory/x.md"),
        ("a/b/", "a/b"),
        ("workspace/agent/memory/x", "workspace/agent/memory/x"),
    ],
)
def test_a_path_inside_the_memory_tree(path: str, expected: str) -> None:
    assert reading.memory_relative(path) == expected


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../x", "a/../../x", "memory/", ".", "/workspace/agent/memory/"]
)
def test_a_path_outside_the_memory_tree(path: str) -> None:
    with pytest.raises(ValueError) as caught:
        reading.memory_relative(path)
    assert str(caught.value) == f"{path}: not a file inside the memory tree"


@pytest.mark.parametrize("path", ["", "   ", "a\x00b", None, 3])
def test_a_path_that_is_not_a_string(path: object) -> None:
    with pytest.raises(ValueError) as caught:
        reading.memory_relative(path)  # type: ignore[arg-type]
    assert str(caught.value) == "path must be a non-empty string"


def memory_of(tmp_path: Path, files: dict[str, bytes]) -> Path:
    groups = tmp_path / "groups"
    (groups / "fam" / "memory").mkdir(parents=True)
    for relative, data in files.items():
        (groups / "fam" / "memory" / relative).parent.mkdir(parents=True, exist_ok=True)
        (groups / "fam" / "memory" / relative).write_bytes(data)
    return groups


def test_read_lines_gives_the_lines_asked_for(tmp_path: Path) -> None:
    groups = memory_of(
        tmp_path, {"a/notes.md": "".join(f"line {i}\n" for i in range(1, 11)).encode()}
    )
    assert reading.read_lines(groups, "fam", "memory/a/notes.md", 3, 2) == {
        "path": "memory/a/notes.md",
        "missing": False,
        "from_line": 3,
        "to_line": 4,
        "total_lines": 10,
        "text": "line 3\nline 4",
    }
    got = reading.read_lines(groups, "fam", "a/notes.md")
    assert (got["from_line"], got["to_line"], got["text"]) == (
        1,
        10,
        "".join(f"line {i}\n" for i in range(1, 11)).strip(),
    )
    got = reading.read_lines(groups, "fam", "a/notes.md", 0, 0)
    assert (got["from_line"], got["to_line"], got["text"]) == (1, 1, "line 1")
    got = reading.read_lines(groups, "fam", "a/notes.md", -5, 1)
    assert (got["from_line"], got["to_line"], got["text"]) == (1, 1, "line 1")
    got = reading.read_lines(groups, "fam", "a/notes.md", 10, 5)
    assert (got["from_line"], got["to_line"], got["text"]) == (10, 10, "line 10")
    got = reading.read_lines(groups, "fam", "a/notes.md", 11, 5)
    assert (got["from_line"], got["to_line"], got["total_lines"], got["text"]) == (11, 10, 10, "")
    got = reading.read_lines(groups, "fam", "a/notes.md", "2", "1")  # type: ignore[arg-type]
    assert got["text"] == "line 2"


def test_read_lines_takes_at_most_400_lines(tmp_path: Path) -> None:
    groups = memory_of(tmp_path, {"big.md": "".join(f"{i}\n" for i in range(1, 501)).encode()})
    got = reading.read_lines(groups, "fam", "big.md", 1, 1000)
    assert (got["from_line"], got["to_line"], got["total_lines"]) == (1, 400, 500)
    assert got["text"] == "\n".join(str(i) for i in range(1, 401))
    got = reading.read_lines(groups, "fam", "big.md", 1, 400)
    assert got["to_line"] == 400
    got = reading.read_lines(groups, "fam", "big.md", 1, 399)
    assert got["to_line"] == 399


def test_read_lines_of_a_missing_file(tmp_path: Path) -> None:
    groups = memory_of(tmp_path, {"a.md": b"x"})
    expected = {
        "path": "memory/b.md",
        "missing": True,
        "from_line": 1,
        "to_line": 0,
        "total_lines": 0,
        "text": "",
    }
    assert reading.read_lines(groups, "fam", "b.md") == expected
    assert reading.read_lines(groups, "fam", "b.md", 7)["from_line"] == 7
    expected["path"] = "memory/b.md"
    assert reading.read_lines(groups, "other", "b.md") == expected


def test_read_lines_replaces_bad_bytes_and_cuts_long_text(tmp_path: Path) -> None:
    groups = memory_of(
        tmp_path, {"bad.md": b"a\xffb\r\nc", "long.md": b"x" * 100_001, "fit.md": b"x" * 100_000}
    )
    got = reading.read_lines(groups, "fam", "bad.md")
    assert (got["text"], got["total_lines"]) == ("a\ufffdb\nc", 2)
    assert reading.read_lines(groups, "fam", "long.md")["text"] == "x" * 100_000 + "\n[cut]"
    assert reading.read_lines(groups, "fam", "fit.md")["text"] == "x" * 100_000


def test_read_lines_reads_the_first_4_mib_of_a_larger_file(tmp_path: Path) -> None:
    line = b"y" * 1023 + b"\n"
    groups = memory_of(tmp_path, {"huge.md": line * 4096 + b"tail\n"})
    got = reading.read_lines(groups, "fam", "huge.md", 4096, 5)
    assert (got["total_lines"], got["to_line"], got["text"]) == (4096, 4096, "y" * 1023)


def test_read_lines_refuses_a_symlink(tmp_path: Path) -> None:
    groups = memory_of(tmp_path, {"a.md": b"x"})
    (groups / "fam" / "memory" / "link.md").symlink_to(groups / "fam" / "memory" / "a.md")
    with pytest.raises(UnsafePath):
        reading.read_lines(groups, "fam", "link.md")
    with pytest.raises(UnsafePath, match="is a regular file, not a folder"):
        reading.read_lines(groups, "fam", "a.md/b.md")
    with pytest.raises(ValueError, match="not a file inside the memory tree"):
        reading.read_lines(groups, "fam", "../x.md")


# memory: text that reads as an instruction (orchestrator/memory/roletext.py)


@pytest.mark.parametrize(
    "line",
    [
        "You are a helpful bot",
        "- Never swear",
        "> always answer briefly",
        "1. Do not lie",
        "2) Reply only in French",
        "**From now on** be brief",
        "Du bist ein Assistent",
        "Immer montags den Müll rausbringen",
        "Eres un asistente",
        "No añadas nada",
        "Tu es un assistant",
        "Ne dis jamais cela",
        "À partir de maintenant, parle bas",
        "你是一个助手",
        "以簡體回应",
        "あなたは先生です",
        "무시하세요",
    ],
)
def test_a_role_line(line: str) -> None:
    assert roletext.is_role_line(line) is True


@pytest.mark.parametrize(
    "line",
    ["Alwaysy late", "The cat is always hungry", "Neverland trip", "Groceries: milk", "", "   "],
)
def test_not_a_role_line(line: str) -> None:
    assert roletext.is_role_line(line) is False


@pytest.mark.parametrize(
    "title",
    [
        "Persona",
        "My rules",
        "House Verhaltensregeln",
        "How to reply",
        "Normas",
        "话题 角色",
        "말투",
    ],
)
def test_a_role_heading(title: str) -> None:
    assert roletext.is_role_heading(title) is True


@pytest.mark.parametrize("title", ["Tonight", "Shopping list", "Rolex watches", "Regelnx", ""])
def test_not_a_role_heading(title: str) -> None:
    assert roletext.is_role_heading(title) is False


def test_read_lines_gives_60_lines_by_default(tmp_path: Path) -> None:
    groups = memory_of(tmp_path, {"many.md": "".join(f"{i}\n" for i in range(1, 101)).encode()})
    got = reading.read_lines(groups, "fam", "many.md")
    assert (got["from_line"], got["to_line"], got["total_lines"]) == (1, 60, 100)
    assert got["text"] == "\n".join(str(i) for i in range(1, 61))


def test_the_longest_form_wins_whatever_its_letter_case() -> None:
    assert strip_mention("Helper: Bot hi", ["helper", "Helper: Bot"]) == "hi"
    assert strip_mention("Helper: Bot hi", ["Helper: Bot", "helper"]) == "hi"


def test_a_longer_form_that_runs_into_a_word_leaves_the_shorter_to_try() -> None:
    assert strip_mention("Helper: Botty hi", ["Helper", "Helper: Bot"]) == "Botty hi"


def test_a_handle_keeps_its_own_letters() -> None:
    assert strip_mention("/x@xena", ["@Xena"]) == "/x"
    assert strip_mention("/x@XXbot", ["XXbot"]) == "/x"


def test_a_piece_too_long_once_escaped_is_cut_again_at_two_thirds_or_16() -> None:
    text = " &a \na &&& b&b<\n \n<\nb<\n<"
    assert mrkdwn_pieces(text, 31, 24) == [
        " &amp;a",
        "a &amp;&amp;&amp; b&amp;b&lt;",
        " \n&lt;\nb&lt;\n&lt;",
    ]


def test_an_injected_file_over_the_budget_names_itself(tmp_path: Path) -> None:
    root = agent(tmp_path, {"system/definition.md": b"d" * 16001})
    assert reading.read_injected(root, "system/definition.md") == "d" * 16000 + NOTICE.replace(
        "index.md", "system/definition.md"
    )


def test_invalid_yaml_gives_the_problem_not_the_context() -> None:
    import yaml

    got = okf.split_frontmatter("---\na: [1\n---\n")
    if hasattr(yaml, "CSafeLoader"):
        assert got.error == "did not find expected ',' or ']' (frontmatter line 2)"
    else:
        assert got.error == "expected ',' or ']', but got '<stream end>' (frontmatter line 2)"


# found by comparing split_message with its mutants on random text
FOUND = [
    ("😀\n\n X", 22, ["😀\n\n X"]),
    ("😀 ``````py\nX\n\nword ", 17, ["😀 ``````py", "X\n\nword"]),
    ("X``````\na```py\n\nb\n``````", 20, ["X``````\na```py\n\n\n```", "```py\nb\n``````"]),
    ("\n\n  😀\nX😀 \n\n  ```py\n", 17, ["  😀\nX😀", "  ```py"]),
    ("b```py\n```py\nb😀```", 16, ["b```py\n```py", "b😀```"]),
    (" a\nX aa word \n```", 16, [" a", "X aa word \n```"]),
    ("X😀a```py\n```py\nXbX", 18, ["X😀a```py\n```p", "y\nXbX"]),
]


@pytest.mark.parametrize(("text", "limit", "expected"), FOUND)
def test_split_message_found_cases(text: str, limit: int, expected: list[str]) -> None:
    assert split_message(text, limit) == expected


def test_split_message_keeps_a_leading_or_trailing_x() -> None:
    assert split_message("X hello X", 16) == ["X hello X"]


def test_a_length_is_a_whole_number() -> None:
    assert type(textfmt.utf16_len("ab\U0001f600")) is int
    assert textfmt.utf16_len("ab\U0001f600") == 4

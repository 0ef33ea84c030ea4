"""Exact behaviour of the offline provider (agent/providers/offline.py): each command's
tool calls step by step and its answers, character for character, with the tool
results given as the runner would give them."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

import pytest

from orchestrator.agent.providers import offline
from orchestrator.agent.providers.base import (
    FLUSH,
    SUMMARY,
    Completion,
    CompletionRequest,
    ToolCall,
)
from orchestrator.agent.providers.offline import (
    INTRO,
    STOPWORDS,
    OfflineProvider,
    _gist,
    _keywords,
    _sentences,
    _slug,
    _subject,
)

PROVIDER = OfflineProvider("offline")


def ask(text: str, *tail: dict[str, Any], system: str = "", purpose: str = "turn") -> Completion:
    messages = [{"role": "user", "content": text}, *tail]
    return PROVIDER.complete(CompletionRequest(system, messages, purpose=purpose))


def called(*calls: ToolCall) -> dict[str, Any]:
    """The assistant message that made ``calls``."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }


def answer(call: ToolCall, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def calls_of(completion: Completion) -> tuple[ToolCall, ...]:
    assert completion.text is None
    return completion.tool_calls


# the turn itself


def test_a_conversation_without_a_user_message_gets_no_reply() -> None:
    request = CompletionRequest("", [{"role": "assistant", "content": "hi"}])
    assert PROVIDER.complete(request) == Completion("NO_REPLY")
    assert PROVIDER.complete(CompletionRequest("", [])) == Completion("NO_REPLY")


def test_anything_else_gets_the_introduction() -> None:
    assert ask("hello there") == Completion(INTRO)
    assert INTRO.startswith("I am the offline provider: a rules-based stand-in")


def test_only_the_last_user_message_is_the_command() -> None:
    request = CompletionRequest(
        "",
        [
            {"role": "user", "content": "search memory for tea"},
            {"role": "assistant", "content": "found"},
            {"role": "user", "content": "hello"},
        ],
    )
    assert PROVIDER.complete(request) == Completion(INTRO)


def test_an_assistant_message_without_tool_calls_is_no_step() -> None:
    said = {"role": "assistant", "content": "thinking"}
    assert ask("search memory for tea", said) == Completion(
        None, (ToolCall("s1", "memory_search", {"query": "tea"}),)
    )


# summary and flush


def test_a_summary_lists_the_user_messages_cut() -> None:
    messages = [
        {"role": "user", "content": "  one  "},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "x" * 250},
    ]
    request = CompletionRequest("", messages, purpose=SUMMARY)
    assert PROVIDER.complete(request) == Completion(
        f"2 earlier user messages:\n- one\n- {'x' * 200}"
    )
    nothing = CompletionRequest("", [{"role": "assistant", "content": "a"}], purpose=SUMMARY)
    assert PROVIDER.complete(nothing) == Completion("Nothing was said before.")


def test_a_flush_appends_every_sentence_of_the_earlier_user_messages() -> None:
    messages = [
        {"role": "user", "content": "Ann likes tea. Bob is tall!\nCarol?"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "- 你好。再见 " + "y" * 600},
        {"role": "user", "content": "the flush prompt"},
    ]
    request = CompletionRequest("", messages, purpose=FLUSH)
    notes = f"- Ann likes tea.\n- Bob is tall!\n- Carol?\n- 你好。\n- {('再见 ' + 'y' * 600)[:500]}"
    assert PROVIDER.complete(request) == Completion(
        None, (ToolCall("f1", "append_daily", {"content": notes}),)
    )


def test_a_flush_with_nothing_said_or_after_its_call_gets_no_reply() -> None:
    alone = CompletionRequest("", [{"role": "user", "content": "flush"}], purpose=FLUSH)
    assert PROVIDER.complete(alone) == Completion("NO_REPLY")
    call = ToolCall("f1", "append_daily", {"content": "- a"})
    done = CompletionRequest(
        "",
        [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "flush"},
            called(call),
            answer(call, "ok"),
        ],
        purpose=FLUSH,
    )
    assert PROVIDER.complete(done) == Completion("NO_REPLY")


def test_sentences_split_after_their_ends_and_at_line_breaks() -> None:
    assert _sentences("a. b!  c?\td\n\ne\u3002f\uff01g\uff1fh") == [
        "a.",
        "b!",
        "c?",
        "d",
        "e。",
        "f\uff01",
        "g\uff1f",
        "h",
    ]
    assert _sentences(" - * x.*-\t \n-\n") == ["x."]
    assert _sentences("3.5 is a.b") == ["3.5 is a.b"]


# remember


class FixedClock:
    @staticmethod
    def now(tz: tzinfo | None = None) -> datetime:
        assert tz is UTC
        return datetime(2030, 1, 2, 23, 0, tzinfo=UTC)


@pytest.fixture
def fixed_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline, "datetime", FixedClock)


READS = (
    ToolCall("r1", "read_file", {"path": "memory/facts/index.md"}),
    ToolCall("r2", "read_file", {"path": "memory/index.md"}),
)
CONCEPT = (
    '---\ntype: fact\ntitle: "Ann"\ndescription: "Ann is a \\"vet\\" in Köln"\n---\n\n'
    '# Ann\n\nAnn is a "vet" in Köln.\n\nRecorded 2030-01-02.\n'
)
LINE = '- [Ann](ann.md): Ann is a "vet" in Köln'
WRITE = ToolCall("w1", "write_file", {"path": "memory/facts/ann.md", "content": CONCEPT})
APPEND = ToolCall(
    "w2",
    "append_file",
    {
        "path": "memory/facts/index.md",
        "content": LINE + "\n",
        "create_with": "# Facts\n\nDurable facts, one per file.\n\n",
        "skip_if_present": True,
    },
)
LINK = ToolCall(
    "w3",
    "append_file",
    {
        "path": "memory/index.md",
        "content": "- [Facts](facts/index.md): durable facts, one per file.\n",
        "skip_if_present": True,
    },
)
REMEMBER = 'Please remember that Ann is a "vet"\n  in Köln!!'


def test_remember_first_reads_both_indexes() -> None:
    assert ask(REMEMBER) == Completion(None, READS)
    assert ask("REMEMBER x") == Completion(None, READS)


def remember_step(facts: str, top: str) -> Completion:
    return ask(REMEMBER, called(*READS), answer(READS[0], facts), answer(READS[1], top))


def test_remember_writes_the_fact_and_links_it_from_both_indexes(fixed_day: None) -> None:
    assert remember_step("ERROR: no such file", "# Memory\n") == Completion(
        None, (WRITE, APPEND, LINK)
    )


def test_remember_replaces_the_facts_line_in_its_index_and_links_once(fixed_day: None) -> None:
    facts = "# Facts\n\n- [Bob](bob.md): Bob\n- [Ann](ann.md): Ann is old\n"
    edit = ToolCall(
        "w2",
        "edit_file",
        {
            "path": "memory/facts/index.md",
            "old_text": "- [Ann](ann.md): Ann is old",
            "new_text": LINE,
        },
    )
    assert remember_step(facts, "- [Facts](facts/index.md)") == Completion(None, (WRITE, edit))


def test_remember_appends_when_the_index_could_not_be_read(fixed_day: None) -> None:
    facts = "ERROR: - [Ann](ann.md): odd"
    assert remember_step(facts, "ERROR: no index") == Completion(None, (WRITE, APPEND))


def test_remember_uses_only_the_latest_steps_results(fixed_day: None) -> None:
    earlier = answer(READS[0], "ERROR: earlier")
    completion = ask(
        REMEMBER,
        called(READS[0]),
        earlier,
        called(*READS),
        answer(READS[0], "# Facts\n"),
        answer(READS[1], "# Memory\n"),
    )
    # an error of an earlier step is not one of the writes
    assert completion == Completion('Noted: Ann is a "vet" in Köln. Saved to memory/facts/ann.md.')
    done = ask(
        REMEMBER,
        called(*READS),
        answer(READS[0], "ERROR: first"),
        answer(READS[1], "x"),
        called(WRITE, APPEND),
        answer(WRITE, "wrote"),
        answer(APPEND, "appended"),
    )
    assert done == Completion('Noted: Ann is a "vet" in Köln. Saved to memory/facts/ann.md.')


def test_remember_says_the_first_error_of_its_writes() -> None:
    done = ask(
        REMEMBER,
        called(*READS),
        answer(READS[0], "x"),
        answer(READS[1], "x"),
        called(WRITE, APPEND, LINK),
        answer(WRITE, "wrote"),
        answer(APPEND, "ERROR: one"),
        answer(LINK, "ERROR: two"),
    )
    assert done == Completion("I could not save that to memory: ERROR: one")


def test_a_facts_subject_and_file_name() -> None:
    assert _subject("Bob works at the mill") == "Bob"
    assert _subject("my sister LIVES in Oslo") == "my sister"
    assert _subject("Cats prefers fish") == "Cats"
    assert _subject("one two three four five six seven") == "one two three four five six"
    assert _subject("island is") == "island is"
    assert _slug("Ann's Cat!") == "ann-s-cat"
    assert _slug("index") == "index-fact"
    assert _slug("LOG") == "log-fact"
    assert _slug("!!!") == "fact"
    assert _slug("a" * 70) == "a" * 60
    assert _slug("x" * 59 + " y") == "x" * 59 + "-"


# learned behaviors

READ = ToolCall("l1", "memory_read", {"label": "learned"})
LEARN = "Please from now on:  answer   in French.!"


def test_learn_reads_the_learned_behaviors_first() -> None:
    assert ask(LEARN) == Completion(None, (READ,))
    assert ask("FROM NOW ON\nbe brief") == Completion(None, (READ,))


def learn_step(current: str) -> Completion:
    return ask(LEARN, called(READ), answer(READ, current))


def write(content: str) -> ToolCall:
    return ToolCall("l2", "memory_write", {"label": "learned", "content": content})


def test_learn_writes_the_rule_added() -> None:
    line = "- From now on, answer in French.\n"
    assert learn_step("- old\n\n\n") == Completion(None, (write("- old\n" + line),))
    assert learn_step("- old") == Completion(None, (write("- old\n" + line),))
    assert learn_step("(empty: nothing learned)") == Completion(None, (write(line),))
    assert learn_step(" \n") == Completion(None, (write(line),))


def test_learn_says_a_rule_it_has_and_a_read_that_failed() -> None:
    assert learn_step("- a\n- From now on, answer in French.\n") == Completion(
        "That is already one of my learned behaviors."
    )
    assert learn_step("ERROR: not yours") == Completion(
        "I could not read the learned behaviors: ERROR: not yours"
    )


def test_learn_says_what_the_write_gave() -> None:
    line = write("x")

    def done(outcome: str) -> Completion:
        return ask(LEARN, called(READ), answer(READ, "ERROR"), called(line), answer(line, outcome))

    assert done("PERSISTED for the next context") == Completion(
        "Learned: from now on, answer in French. (PERSISTED for the next context)"
    )
    assert done("ERROR: a creator only") == Completion(
        "I did not learn that. ERROR: a creator only"
    )


def test_the_learned_behaviors_of_the_context_are_quoted() -> None:
    system = "# Top\n\n## Learned behaviors\n\n- be brief\n### kept\n- x\n\n## Next\nno\n"
    assert ask("What have you learned?", system=system) == Completion(
        "The learned behaviors in my context:\n- be brief\n### kept\n- x"
    )
    assert ask("what are your learned behaviours", system="## Learned behaviors\n- a\n") == (
        Completion("The learned behaviors in my context:\n- a")
    )
    assert ask("what are your learned behaviors?!", system="# Only\n") == Completion(
        "I was given no learned behaviors in this context."
    )
    assert ask("what have you learned", system="## Learned behaviors\n- a\n# Next\nb") == (
        Completion("The learned behaviors in my context:\n- a")
    )


# search


def test_search_asks_the_hosts_index_and_lists_what_it_found() -> None:
    call = ToolCall("s1", "memory_search", {"query": "green tea"})
    assert ask("Search the memory for green\ntea?!") == Completion(
        None, (ToolCall("s1", "memory_search", {"query": "green\ntea"}),)
    )
    assert ask("search memory for green tea") == Completion(None, (call,))
    found = ask("search memory for green tea", called(call), answer(call, "a.md: tea"))
    assert found == Completion("Found in memory:\n\na.md: tea")
    for nothing in ("(no results)", "ERROR: no index"):
        said = ask("search memory for green tea", called(call), answer(call, nothing))
        assert said == Completion("Nothing in memory matches 'green tea'.")


# scheduled tasks


def test_a_scheduled_tasks_text_is_said() -> None:
    assert ask("[scheduled task 3]  drink\nwater ") == Completion("drink\nwater")
    assert ask("[scheduled task 3]") == Completion("NO_REPLY")


def task(text: str) -> tuple[ToolCall, ...]:
    return calls_of(ask(text))


def test_reminders_are_scheduled_with_their_delay() -> None:
    assert task("Remind me in 010 Minutes to call\n  Bob.!") == (
        ToolCall("t1", "schedule_task", {"text": "Reminder: call Bob", "at": "10m"}),
    )
    assert task("remind me in 2 h about tea") == (
        ToolCall("t1", "schedule_task", {"text": "Reminder: tea", "at": "2h"}),
    )
    assert task("remind me in 5 secs that it boils") == (
        ToolCall("t1", "schedule_task", {"text": "Reminder: it boils", "at": "5s"}),
    )
    assert task("remind me in 1 day pay rent") == (
        ToolCall("t1", "schedule_task", {"text": "Reminder: pay rent", "at": "1d"}),
    )


def test_a_daily_task_is_a_cron_schedule() -> None:
    assert task("Every day at 08:05, water the\n plants") == (
        ToolCall("t1", "schedule_task", {"text": "water the plants", "cron": "5 8 * * *"}),
    )
    assert task("every day at 23.59 sleep") == (
        ToolCall("t1", "schedule_task", {"text": "sleep", "cron": "59 23 * * *"}),
    )


def test_tasks_are_listed_and_cancelled() -> None:
    assert task("Show the scheduled tasks?") == (ToolCall("t1", "list_tasks", {}),)
    assert task("list my reminders") == (ToolCall("t1", "list_tasks", {}),)
    assert task("Cancel the reminder #4.") == (ToolCall("t1", "cancel_task", {"id": 4}),)


def test_a_tasks_result_is_said_capitalized_or_as_an_error() -> None:
    call = ToolCall("t1", "list_tasks", {})
    assert ask("list tasks", called(call), answer(call, "no tasks.")) == Completion("No tasks.")
    assert ask("list tasks", called(call), answer(call, "")) == Completion("")
    assert ask("list tasks", called(call), answer(call, "ERROR: x")) == Completion(
        "I could not do that. ERROR: x"
    )


# recall

GREP = ToolCall("g1", "grep", {"pattern": r"\b(?:ann|tea\-time)\b", "path": "memory"})


def test_recall_greps_memory_for_the_keywords() -> None:
    assert ask("What do you know about Ann and the TEA-TIME?") == Completion(None, (GREP,))
    assert ask("tell me about\nAnn tea-time") == Completion(None, (GREP,))


def test_keywords_leave_out_the_stopwords_and_single_letters() -> None:
    assert _keywords(" ".join(sorted(STOPWORDS)) + " x Cat's a/b ox") == ["cat's", "a/b", "ox"]
    assert _keywords("the a") == ["the", "a"]
    assert len(STOPWORDS) == 32
    assert {"a", "an", "the", "my", "with", "this", "that", "or", "and"} <= STOPWORDS


def recall_step(grep: str) -> Completion:
    return ask("what is Ann tea-time", called(GREP), answer(GREP, grep))


def test_recall_reads_the_files_that_name_every_keyword() -> None:
    grep = (
        "memory/a.md:Ann has tea-time\n"
        "memory/b.md:ann only\n"
        "memory/b.md:and tea-time later\n"
        "memory/c.md:tea-time\n"
        "memory/index.md:Ann tea-time\n"
        "memory/x.txt:Ann tea-time\n"
        "memory/d.md:Annie tea-times\n"
        "memory/e.md:ann tea-time\n"
        "memory/f.md:ann tea-time\n"
    )
    assert recall_step(grep) == Completion(
        None,
        (
            ToolCall("r0", "read_file", {"path": "memory/a.md"}),
            ToolCall("r1", "read_file", {"path": "memory/b.md"}),
            ToolCall("r2", "read_file", {"path": "memory/e.md"}),
        ),
    )


def test_recall_reads_the_indexes_only_when_nothing_else_names_it() -> None:
    grep = "memory/index.md:Ann tea-time\nmemory/log.md:ann: tea-time\nmemory/z.md:ann\n"
    assert recall_step(grep) == Completion(
        None,
        (
            ToolCall("r0", "read_file", {"path": "memory/index.md"}),
            ToolCall("r1", "read_file", {"path": "memory/log.md"}),
        ),
    )
    assert recall_step("memory/z.md:ann\nnot a line\n") == Completion(
        "I have nothing in memory about Ann tea-time."
    )


def test_recall_answers_with_the_gist_of_each_file_read() -> None:
    reads = (
        ToolCall("r0", "read_file", {"path": "memory/a.md"}),
        ToolCall("r1", "read_file", {"path": "memory/b.md"}),
        ToolCall("r2", "read_file", {"path": "memory/c.md"}),
    )
    completion = ask(
        "what is Ann tea-time",
        called(GREP),
        answer(GREP, "memory/a.md:Ann tea-time"),
        called(*reads),
        answer(reads[0], "---\ntitle: Ann tea-time\n---\n# Ann\nAnn is here.\nAnn has tea-time.\n"),
        answer(reads[1], "ERROR: gone"),
        answer(reads[2], "Plain tea-time note"),
    )
    assert completion == Completion(
        "From memory:\n- Ann has tea-time. (memory/a.md)\n- Plain tea-time note (memory/c.md)"
    )
    nothing = ask(
        "what is Ann tea-time",
        called(GREP),
        answer(GREP, "memory/a.md:Ann tea-time"),
        called(reads[1]),
        answer(reads[1], "ERROR: gone"),
    )
    assert nothing == Completion("I have nothing in memory about Ann tea-time.")


def test_the_gist_is_the_body_line_naming_most_keywords() -> None:
    assert _gist("---\na: b\n---\n# T\nfirst\nann and tea\nann\n", ["ann", "tea"]) == (
        "ann and tea"
    )
    assert _gist("# T\n  first  \nsecond\n", ["zz"]) == "first"
    assert _gist("---\na: b\n---\n# only a title\n", ["a"]) == ("---\na: b\n---\n# only a title")
    assert _gist("  " + "w" * 400, ["w"]) == "w" * 300
    assert _gist("# T\n" + "k " * 200, ["k"]) == ("k " * 200).strip()[:300]


def test_a_file_of_headings_only_is_its_own_gist_cut() -> None:
    assert _gist("# " + "h" * 400, ["h"]) == ("# " + "h" * 400)[:300]


def test_remember_takes_the_last_two_results_of_its_reads(fixed_day: None) -> None:
    completion = ask(
        REMEMBER,
        called(*READS),
        {"role": "tool", "tool_call_id": "x", "name": "read_file", "content": "extra"},
        answer(READS[0], "ERROR: none"),
        answer(READS[1], "# Memory\n"),
    )
    assert completion == Completion(None, (WRITE, APPEND, LINK))


def test_a_rule_keeps_its_last_letters() -> None:
    assert ask("from now on, greet REX.", called(READ), answer(READ, "")) == Completion(
        None, (write("- From now on, greet REX.\n"),)
    )


def test_a_tool_result_without_content_is_empty_text() -> None:
    silent = {"role": "tool", "tool_call_id": "l1", "name": "memory_read"}
    assert ask(LEARN, called(READ), silent) == Completion(
        None, (write("- From now on, answer in French.\n"),)
    )


def test_the_first_learned_section_is_quoted() -> None:
    system = "## Learned behaviors\n- first\n## Learned behaviors\n- second\n"
    assert ask("what have you learned", system=system) == Completion(
        "The learned behaviors in my context:\n- first"
    )


def test_user_messages_without_text_are_not_flushed_or_summed_up() -> None:
    for said in ({"role": "user"}, {"role": "user", "content": "  "}):
        request = CompletionRequest("", [said, {"role": "user", "content": "flush"}], purpose=FLUSH)
        assert PROVIDER.complete(request) == Completion("NO_REPLY")
    summary = CompletionRequest("", [{"role": "user"}], purpose=SUMMARY)
    assert PROVIDER.complete(summary) == Completion("1 earlier user messages:\n- ")


def test_sentences_keep_their_letters() -> None:
    assert _sentences("X is here. X") == ["X is here.", "X"]


def test_a_tasks_result_is_the_last_message_of_the_turn() -> None:
    call = ToolCall("t1", "list_tasks", {})
    thinking = {"role": "assistant", "content": "thinking"}
    assert ask("list tasks", thinking, called(call), answer(call, "done.")) == Completion("Done.")
    silent = {"role": "tool", "tool_call_id": "t1", "name": "list_tasks"}
    assert ask("list tasks", called(call), silent) == Completion("")


def test_each_task_command_says_its_result() -> None:
    for text, tool in (
        ("remind me in 5 minutes to stretch", "schedule_task"),
        ("every day at 08:00 stretch", "schedule_task"),
        ("cancel reminder 2", "cancel_task"),
    ):
        call = ToolCall("t1", tool, {})
        assert ask(text, called(call), answer(call, "ok.")) == Completion("Ok.")


def test_searchs_result_is_the_last_message_and_may_be_empty() -> None:
    call = ToolCall("s1", "memory_search", {"query": "tea"})
    thinking = {"role": "assistant", "content": "thinking"}
    assert ask("search memory for tea", thinking, called(call), answer(call, "a.md: tea")) == (
        Completion("Found in memory:\n\na.md: tea")
    )
    silent = {"role": "tool", "tool_call_id": "s1", "name": "memory_search"}
    assert ask("search memory for tea", called(call), silent) == Completion("Found in memory:\n\n")


def test_learn_keeps_the_current_texts_own_ending() -> None:
    assert learn_step("- old \n") == Completion(
        None, (write("- old \n- From now on, answer in French.\n"),)
    )
    assert learn_step("- say X\n") == Completion(
        None, (write("- say X\n- From now on, answer in French.\n"),)
    )


def test_learn_says_the_last_result() -> None:
    line = write("x")
    extra = {"role": "tool", "tool_call_id": "z", "name": "other", "content": "other"}
    done = ask(
        LEARN, called(READ), answer(READ, ""), extra, called(line), answer(line, "PERSISTED")
    )
    assert done == Completion("Learned: from now on, answer in French. (PERSISTED)")


def test_recall_answers_for_reads_without_path_or_content() -> None:
    odd = ToolCall("r0", "read_file", {})
    silent = {"role": "tool", "tool_call_id": "r0", "name": "read_file"}
    completion = ask(
        "what is Ann tea-time",
        called(GREP),
        answer(GREP, "memory/a.md:Ann tea-time"),
        called(odd),
        silent,
    )
    assert completion == Completion("From memory:\n-  ()")

"""The offline provider: a deterministic, rules-based stand-in for a language model.

It needs no network and understands nothing. It drives the same tool path a model
would, with a small command set:

- ``remember that <fact>``: writes ``memory/facts/<subject>.md`` (OKF frontmatter) and
  links it from ``memory/facts/index.md``, which ``memory/index.md`` links to;
- ``what do you know about <topic>`` (or ``what is <topic>?``): greps memory and answers
  from the files it finds;
- ``from now on, <rule>``: reads the learned behaviors (``memory_read``) and replaces
  them with the rule added (``memory_write`` on ``learned``), which the host grants only
  to a creator's turn;
- ``search memory for <words>``: asks the host's index (``memory_search``) and lists
  what it found;
- ``remind me in <n> minutes to <something>``, ``every day at HH:MM <something>``,
  ``list my reminders`` and ``cancel reminder <n>``: scheduled tasks, kept by the host
  (``schedule_task``, ``list_tasks``, ``cancel_task``); when a task comes due, its text
  comes back as a message beginning ``[scheduled task <n>]``, which it says in the chat;
- ``what have you learned?``: quotes the learned behaviors from its context (what a
  fresh context was given, not the file now);
- anything else: says what it is and what it can do.

In a memory flush it appends the conversation's user messages to the daily note; as a
summarizer it lists them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from orchestrator.agent.providers.base import (
    FLUSH,
    SUMMARY,
    Completion,
    CompletionRequest,
    Provider,
    ToolCall,
)
from orchestrator.memory.okf import RESERVED_NAMES

REMEMBER = re.compile(
    r"^\s*(?:please\s+)?remember(?:\s+that)?\s+(?P<fact>.+?)\s*[.!]*\s*$", re.IGNORECASE | re.DOTALL
)
RECALL = re.compile(
    r"^\s*(?:what\s+do\s+you\s+know\s+about|what\s+(?:is|are|was)|tell\s+me\s+about|"
    r"do\s+you\s+remember)\s+(?P<topic>.+?)\s*[?.!]*\s*$",
    re.IGNORECASE | re.DOTALL,
)
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "my",
        "your",
        "our",
        "their",
        "his",
        "her",
        "its",
        "of",
        "about",
        "what",
        "do",
        "you",
        "know",
        "is",
        "are",
        "was",
        "were",
        "me",
        "i",
        "we",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "that",
        "this",
        "with",
    ]
)
LEARN = re.compile(
    r"^\s*(?:please\s+)?from\s+now\s+on\s*[,:]?\s+(?P<rule>.+?)\s*$", re.IGNORECASE | re.DOTALL
)
LEARNED_ASK = re.compile(
    r"^\s*what\s+(?:have\s+you\s+learned|are\s+your\s+learned\s+behaviou?rs)\s*[?.!]*\s*$",
    re.IGNORECASE,
)
SEARCH = re.compile(
    r"^\s*search\s+(?:the\s+)?memory\s+for\s+(?P<query>.+?)\s*[?.!]*\s*$",
    re.IGNORECASE | re.DOTALL,
)
REMIND = re.compile(
    r"^\s*remind\s+me\s+in\s+(?P<n>\d+)\s*(?P<unit>seconds?|secs?|minutes?|mins?|hours?|"
    r"days?|[smhd])\s+(?:to\s+|that\s+|about\s+)?(?P<what>.+?)\s*[.!]*\s*$",
    re.IGNORECASE | re.DOTALL,
)
DAILY = re.compile(
    r"^\s*every\s+day\s+at\s+(?P<h>[01]?\d|2[0-3])[:.](?P<m>[0-5]\d)\s*[,:]?\s+"
    r"(?P<what>.+?)\s*$",
    re.IGNORECASE | re.DOTALL,
)
LIST_TASKS = re.compile(
    r"^\s*(?:list|show)\s+(?:my\s+|the\s+)?(?:reminders|tasks|scheduled\s+tasks)\s*[?.!]*\s*$",
    re.IGNORECASE,
)
CANCEL_TASK = re.compile(
    r"^\s*cancel\s+(?:the\s+)?(?:reminder|task)\s+#?(?P<id>\d+)\s*[.!]*\s*$", re.IGNORECASE
)
TASK_RUN = re.compile(r"^\[scheduled task (?P<id>\d+)\]\s*(?P<text>.*)$", re.DOTALL)
LEARNED_SECTION = "## Learned behaviors"
FACTS_DIR = "memory/facts"
NO_REPLY = "NO_REPLY"

INTRO = (
    "I am the offline provider: a rules-based stand-in for a language model. I run "
    "without any network and do not understand free text. I can:\n"
    "- remember that <fact>: save a fact to this group's memory\n"
    "- what do you know about <topic>: search memory and tell you what I find\n"
    "- from now on, <rule>: add a rule to the group's learned behaviors (creators only)\n"
    "- what have you learned?: show the learned behaviors I was given\n"
    "- search memory for <words>: search the whole memory tree, daily notes included\n"
    "- remind me in 10 minutes to <something>; every day at 08:00 <something>\n"
    "- list my reminders; cancel reminder <n>\n"
    "- /clear: start a fresh context (memory is loaded again)\n"
    "For real conversation the operator can give this group a model: "
    "`orchestrator provider add`, then provider and model in its group.yaml."
)


def _slug(text: str) -> str:
    """A fact's file name: never a reserved OKF name (index.md, log.md)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "fact"
    return f"{slug}-fact" if f"{slug}.md" in RESERVED_NAMES else slug


def _subject(fact: str) -> str:
    match = re.match(
        r"(?P<s>.+?)\s+(?:is|are|was|were|lives?|works?|likes?|prefers?)\s", fact, re.IGNORECASE
    )
    return match["s"] if match else " ".join(fact.split()[:6])


def _keywords(topic: str) -> list[str]:
    words = re.findall(r"[\w'/-]+", topic.lower())
    keys = [w for w in words if w not in STOPWORDS and len(w) > 1]
    return keys or words


class OfflineProvider(Provider):
    name = "offline"

    def complete(self, request: CompletionRequest, host: object = None) -> Completion:
        if request.purpose == SUMMARY:
            return Completion(self._summary(request.messages))
        last_user = max(
            (i for i, m in enumerate(request.messages) if m.get("role") == "user"), default=None
        )
        if last_user is None:
            return Completion(NO_REPLY)
        tail = request.messages[last_user + 1 :]
        step = sum(1 for m in tail if m.get("role") == "assistant" and m.get("tool_calls"))
        if request.purpose == FLUSH:
            return self._flush(request.messages, step)
        text = str(request.messages[last_user].get("content", ""))
        if match := REMEMBER.match(text):
            last_calls = max((i for i, m in enumerate(tail) if m.get("tool_calls")), default=-1)
            latest = [m for m in tail[last_calls + 1 :] if m.get("role") == "tool"]
            return self._remember(match["fact"], step, latest)
        if match := LEARN.match(text):
            return self._learn(match["rule"], step, tail)
        if match := SEARCH.match(text):
            if step == 0:
                call = ToolCall("s1", "memory_search", {"query": match["query"]})
                return Completion(None, (call,))
            found = str(tail[-1].get("content", "")) if tail else ""
            if found.startswith("ERROR") or found == "(no results)":
                return Completion(f"Nothing in memory matches {match['query']!r}.")
            return Completion("Found in memory:\n\n" + found)
        if match := TASK_RUN.match(text):
            return Completion(match["text"].strip() or NO_REPLY)
        if match := REMIND.match(text):
            unit = match["unit"].lower()[0]
            what = " ".join(match["what"].split())
            args = {"text": f"Reminder: {what}", "at": f"{int(match['n'])}{unit}"}
            return self._task_call(step, tail, "schedule_task", args)
        if match := DAILY.match(text):
            spec = f"{int(match['m'])} {int(match['h'])} * * *"
            args = {"text": " ".join(match["what"].split()), "cron": spec}
            return self._task_call(step, tail, "schedule_task", args)
        if LIST_TASKS.match(text):
            return self._task_call(step, tail, "list_tasks", {})
        if match := CANCEL_TASK.match(text):
            return self._task_call(step, tail, "cancel_task", {"id": int(match["id"])})
        if LEARNED_ASK.match(text):
            return Completion(self._learned_in(request.system))
        if match := RECALL.match(text):
            return self._recall(match["topic"], step, tail)
        return Completion(INTRO)

    # scheduled tasks

    @staticmethod
    def _task_call(
        step: int, tail: list[dict[str, Any]], tool: str, args: dict[str, Any]
    ) -> Completion:
        """One tool call, then its result said in the chat."""
        if step == 0:
            return Completion(None, (ToolCall("t1", tool, args),))
        result = str(tail[-1].get("content", "")) if tail else ""
        if result.startswith("ERROR"):
            return Completion(f"I could not do that. {result}")
        return Completion(result[:1].upper() + result[1:])

    # remember

    def _remember(self, fact: str, step: int, results: list[dict[str, Any]]) -> Completion:
        """``results``: the tool results of the latest step only."""
        fact = " ".join(fact.split())
        subject = _subject(fact)
        slug = _slug(subject)
        if step == 0:
            return Completion(
                None,
                (
                    ToolCall("r1", "read_file", {"path": f"{FACTS_DIR}/index.md"}),
                    ToolCall("r2", "read_file", {"path": "memory/index.md"}),
                ),
            )
        if step == 1:
            facts_index, top_index = (str(r.get("content", "")) for r in results[-2:])
            title = subject[:1].upper() + subject[1:]
            sentence = fact[:1].upper() + fact[1:]
            today = datetime.now(UTC).strftime("%Y-%m-%d")
            concept = (
                f"---\ntype: fact\ntitle: {_yaml_str(title)}\n"
                f"description: {_yaml_str(sentence)}\n---\n\n"
                f"# {title}\n\n{sentence}.\n\nRecorded {today}.\n"
            )
            line = f"- [{title}]({slug}.md): {sentence}"
            calls = [
                ToolCall("w1", "write_file", {"path": f"{FACTS_DIR}/{slug}.md", "content": concept})
            ]
            # Each shared index changes in one tool call (read, change and write under the
            # runner's lock for that file), so concurrent conversations never lose a link.
            old = next((ln for ln in facts_index.splitlines() if f"]({slug}.md)" in ln), None)
            if old is not None and not facts_index.startswith("ERROR"):
                calls.append(
                    ToolCall(
                        "w2",
                        "edit_file",
                        {"path": f"{FACTS_DIR}/index.md", "old_text": old, "new_text": line},
                    )
                )
            else:
                calls.append(
                    ToolCall(
                        "w2",
                        "append_file",
                        {
                            "path": f"{FACTS_DIR}/index.md",
                            "content": line + "\n",
                            "create_with": "# Facts\n\nDurable facts, one per file.\n\n",
                            "skip_if_present": True,
                        },
                    )
                )
            if not top_index.startswith("ERROR") and "facts/index.md" not in top_index:
                calls.append(
                    ToolCall(
                        "w3",
                        "append_file",
                        {
                            "path": "memory/index.md",
                            "content": "- [Facts](facts/index.md): durable facts, one per file.\n",
                            "skip_if_present": True,
                        },
                    )
                )
            return Completion(None, tuple(calls))
        errors = [
            str(r.get("content")) for r in results if str(r.get("content")).startswith("ERROR")
        ]
        if errors:
            return Completion(f"I could not save that to memory: {errors[0]}")
        return Completion(f"Noted: {fact}. Saved to {FACTS_DIR}/{slug}.md.")

    # learned behaviors

    def _learn(self, rule: str, step: int, tail: list[dict[str, Any]]) -> Completion:
        rule = " ".join(rule.split()).rstrip(".!")
        results = [str(m.get("content", "")) for m in tail if m.get("role") == "tool"]
        if step == 0:
            return Completion(None, (ToolCall("l1", "memory_read", {"label": "learned"}),))
        if step == 1:
            current = results[-1]
            if current.startswith("ERROR"):
                return Completion(f"I could not read the learned behaviors: {current}")
            if current.startswith("(empty"):
                current = ""
            line = f"- From now on, {rule}."
            if line in current:
                return Completion("That is already one of my learned behaviors.")
            base = current.rstrip("\n") + "\n" if current.strip() else ""
            return Completion(
                None,
                (
                    ToolCall(
                        "l2", "memory_write", {"label": "learned", "content": base + line + "\n"}
                    ),
                ),
            )
        outcome = results[-1]
        if outcome.startswith("PERSISTED"):
            return Completion(f"Learned: from now on, {rule}. ({outcome})")
        return Completion(f"I did not learn that. {outcome}")

    @staticmethod
    def _learned_in(system: str) -> str:
        start = system.find(LEARNED_SECTION)
        if start < 0:
            return "I was given no learned behaviors in this context."
        body = system[start + len(LEARNED_SECTION) :]
        end = re.search(r"^#{1,2} ", body, re.MULTILINE)
        text = (body[: end.start()] if end else body).strip()
        return "The learned behaviors in my context:\n" + text

    # recall

    def _recall(self, topic: str, step: int, tail: list[dict[str, Any]]) -> Completion:
        keys = _keywords(topic)
        results = [m for m in tail if m.get("role") == "tool"]
        if step == 0:
            pattern = r"\b(?:" + "|".join(re.escape(k) for k in keys) + r")\b"
            return Completion(
                None, (ToolCall("g1", "grep", {"pattern": pattern, "path": "memory"}),)
            )
        if step == 1:
            # A file answers when it names every keyword (as words), not just one of them.
            covered: dict[str, set[str]] = {}
            for line in str(results[-1].get("content", "")).splitlines():
                path, _, text = line.partition(":")
                if path.endswith(".md"):
                    words = set(re.findall(r"[\w'/-]+", text.lower()))
                    covered.setdefault(path, set()).update(k for k in keys if k in words)
            found = [p for p, hit in covered.items() if hit == set(keys)]
            concepts = [p for p in found if not p.endswith(("index.md", "log.md"))] or found
            if not concepts:
                return Completion(f"I have nothing in memory about {topic}.")
            return Completion(
                None,
                tuple(
                    ToolCall(f"r{i}", "read_file", {"path": p}) for i, p in enumerate(concepts[:3])
                ),
            )
        asked = {
            c["id"]: c["arguments"].get("path", "")
            for m in tail
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        }
        lines = []
        for result in results:
            content = str(result.get("content", ""))
            read_path = asked.get(result.get("tool_call_id"))
            if content.startswith("ERROR") or result.get("name") != "read_file":
                continue
            lines.append(f"- {_gist(content, keys)} ({read_path})")
        if not lines:
            return Completion(f"I have nothing in memory about {topic}.")
        return Completion("From memory:\n" + "\n".join(lines))

    # flush and summary

    def _flush(self, messages: list[dict[str, Any]], step: int) -> Completion:
        if step > 0:
            return Completion(NO_REPLY)
        said = [
            str(m.get("content", "")).strip()
            for m in messages[:-1]
            if m.get("role") == "user" and str(m.get("content", "")).strip()
        ]
        if not said:
            return Completion(NO_REPLY)
        # every sentence its own line, so a fact late in a long message is kept too
        sentences = [x for s in said for x in _sentences(s)]
        notes = "\n".join(f"- {x[:500]}" for x in sentences)
        return Completion(None, (ToolCall("f1", "append_daily", {"content": notes}),))

    def _summary(self, messages: list[dict[str, Any]]) -> str:
        said = [
            str(m.get("content", "")).strip()[:200] for m in messages if m.get("role") == "user"
        ]
        if not said:
            return "Nothing was said before."
        return f"{len(said)} earlier user messages:\n" + "\n".join(f"- {s}" for s in said)


def _yaml_str(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


def _gist(text: str, keys: list[str]) -> str:
    """The body line that names the most keywords (what the file says now: a hand edit
    shows at once), else the first body line; the frontmatter is not the answer."""
    from orchestrator.memory.okf import split_frontmatter

    body_text = text[split_frontmatter(text).block_end :]
    body = [ln.strip() for ln in body_text.splitlines() if ln.strip() and not ln.startswith("#")]
    if not body:
        return text.strip()[:300]

    def score(line: str) -> int:
        words = set(re.findall(r"[\w'/-]+", line.lower()))
        return sum(1 for k in keys if k in words)

    best = max(body, key=score)
    return (best if score(best) else body[0])[:300]


_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|(?<=[\u3002\uff01\uff1f])|\n+")


def _sentences(text: str) -> list[str]:
    """The sentences of ``text`` (split after . ! ? and their CJK forms, and at line
    breaks), stripped, empty ones dropped."""
    return [x.strip(" -*\t") for x in _SENTENCE_END.split(text) if x.strip(" -*\t")]

"""Text that reads as a standing instruction to an agent ("You are ...", "Always ...",
"Ignore previous ..."), in the languages legacy memory is written in: English, German,
Spanish, French, Chinese (Simplified, Traditional and Cantonese), Japanese and Korean.

migrate-memory proposes such text to the operator and never applies it on its own, so
a pattern here errs towards proposing: a household rule ("Immer montags den Müll
rausbringen") is proposed like "Always check labels" is, and the operator drops it.
Words of Latin script must end where a word ends; Chinese, Japanese and Korean are
written without spaces, so their patterns match the start of a line as it is.
"""

from __future__ import annotations

import re

# A line may start with a list marker, a quote marker or bold before the words.
_LINE_START = r"^\s*(?:[-*+>]\s+|\d+[.)]\s+)?(?:\*\*)?"

_LINE_WORDS = {
    "en": r"you\s+are|you're|your\s+(?:role|name|job|persona|personality|task)|always|never|"
    r"do\s+not|don't|ignore\s+(?:all|any|previous|the)|act\s+as|respond\s+(?:in|with|only)|"
    r"reply\s+(?:in|with|only)|speak\s+(?:in|like)|from\s+now\s+on",
    "de": r"du\s+bist|du\s+(?:sollst|darfst|musst)|sie\s+sind\s+(?:ein|eine|der|die)|"
    r"dein(?:e)?\s+(?:rolle|name|aufgabe|persönlichkeit)|ihre\s+(?:rolle|aufgabe)|"
    r"antworte|antworten\s+sie|sprich|sprechen\s+sie|immer|niemals|nie|ignoriere|"
    r"ignorieren\s+sie|verhalte\s+dich|ab\s+(?:jetzt|sofort)|von\s+nun\s+an",
    "es": r"eres|usted\s+es|tu\s+(?:rol|nombre|papel|tarea|trabajo)|su\s+(?:rol|papel)|"
    r"responde|respóndeme|contesta|habla\s+(?:en|como|siempre)|siempre|nunca|jamás|"
    r"no\s+(?:digas|hagas|respondas|uses|utilices|inventes|menciones|compartas|agregues|"
    r"añadas|intentes|ofrezcas|reveles|incluyas|asumas|ignores)|ignora|actúa\s+como|"
    r"a\s+partir\s+de\s+ahora|de\s+ahora\s+en\s+adelante|debes",
    "fr": r"tu\s+es|vous\s+êtes|ton\s+rôle|votre\s+rôle|ton\s+nom|réponds|répondez|toujours|"
    r"jamais|ne\s+\w+\s+jamais|n'\w+\s+jamais|ignore[sz]?\s+(?:les|tout|toutes|tous)|"
    r"agis\s+comme|comporte-toi|parle\s+(?:en|comme)|désormais|à\s+partir\s+de\s+maintenant",
}
# written without spaces: matched as the line starts, no word boundary
_LINE_PHRASES = {
    "zh": r"你是|您是|妳是|你係|你的(?:角色|身份|身分|名字|任务|任務|职责|職責)|"
    r"你嘅(?:角色|身份|名|任務)|请(?:用|以|你|您|务必|记得|不要|勿|只|始终)|"
    r"請(?:用|以|你|您|務必|記得|不要|勿|只|始終)|始终|始終|总是|總是|永远|永遠|一定要|"
    r"必须|必須|务必|務必|绝不|絕不|决不|決不|绝对不|絕對不|不要|不可以|不准|唔好|唔准|"
    r"切勿|禁止|忽略|忽视|忽視|扮演|从现在开始|從現在開始|由而家開始|由依家開始|"
    r"(?:用|以)(?:中文|普通话|普通話|粤语|粵語|广东话|廣東話|英文|英语|英語|繁体|繁體|"
    r"简体|簡體)(?:回答|回覆|回复|作答|回應|回应)",
    "ja": r"あなたは|常に|必ず|決して|絶対に|以下の指示",
    "ko": r"당신은|너는|항상|절대|반드시|무시하",
}
ROLE_LINE = re.compile(
    _LINE_START
    + r"(?:(?:"
    + "|".join(_LINE_WORDS.values())
    + r")\b|"
    + "|".join(_LINE_PHRASES.values())
    + ")",
    re.IGNORECASE,
)

# A heading that names a role, rules or a persona: every line under it is proposed.
_HEADING_WORDS = {
    "en": r"persona|personality|role|instructions?|rules|behaviou?r|system\s+prompt|identity|"
    r"tone|style|guidelines|how\s+to\s+(?:act|behave|respond|reply)",
    "de": r"rolle|persönlichkeit|verhalten|identität|stil|ton|systemprompt",
    "es": r"rol|papel|personalidad|comportamiento|identidad|tono|estilo|reglas|normas|"
    r"instrucciones|directrices|pautas",
    "fr": r"rôle|personnalité|comportement|identité|style|règles|consignes|directives",
}
# German rules, instructions and guidelines are often compounds: "Verhaltensregeln"
_HEADING_ENDINGS = r"\w*(?:regeln|anweisungen|richtlinien|vorgaben)\b"
_HEADING_PHRASES = (
    r"角色|身份|身分|人设|人設|规则|規則|守则|守則|指令|指示|行为|行為|风格|風格|语气|語氣|"
    r"红线|紅線|原则|原則|人格|ルール|役割|キャラクター|口調|역할|규칙|지침|말투"
)
ROLE_HEADING = re.compile(
    r"\b(?:"
    + "|".join(_HEADING_WORDS.values())
    + r")\b|"
    + _HEADING_ENDINGS
    + "|"
    + _HEADING_PHRASES,
    re.IGNORECASE,
)


def is_role_line(line: str) -> bool:
    """Whether a line starts like an instruction to the agent, in any of the languages."""
    return bool(ROLE_LINE.match(line))


def is_role_heading(title: str) -> bool:
    """Whether a heading names a role, rules, a persona or a style."""
    return bool(ROLE_HEADING.search(title))

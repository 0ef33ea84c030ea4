"""A multilingual memory tree for search tests and benchmarks: one family's and its small
bakery's memory, kept in Cantonese (Traditional Chinese), German and English, with folder
indexes that only link and a system/definition.md, as real groups have them. Each
question names the file that answers it. Written for these tests (the people, places and
numbers are made up)."""

# ruff: noqa: RUF001 (Chinese text has its own commas, colons and brackets)

from __future__ import annotations

from pathlib import Path


def concept(kind: str, title: str, body: str) -> str:
    return f"---\ntype: {kind}\ntitle: {title}\n---\n\n# {title}\n\n{body.strip()}\n"


def folder_index(title: str, links: list[tuple[str, str, str]]) -> str:
    """A folder's index.md: a heading and one link a line, with a short description."""
    lines = [f"- [{text}]({target}){sep}" for text, target, sep in links]
    return f"# {title}\n\n" + "\n".join(lines) + "\n"


FILES: dict[str, str] = {
    "index.md": (
        "---\ntitle: Memory\n---\n\n# Memory\n\n## Map\n\n"
        "- [家庭](家庭/index.md)：時間表、阿嫲、學校\n"
        "- [健康](健康/index.md)：覆診、疫苗、牙醫、敏感\n"
        "- [稅務](稅務/index.md)：報稅\n"
        "- [生意](生意/index.md)：熟客\n"
        "- [Familie](familie/index.md): Wochenplan, Kinderarzt, Großeltern, Sommer\n"
        "- [Steuern](steuern/index.md): Steuererklärung, Vermietung, Vorsorge\n"
        "- [Bakery](bakery/index.md): customers, suppliers, invoices, opening hours, tax\n"
        "- [Health](health/index.md): physiotherapy, eyes\n"
        "- [Home](home/index.md): school run, helper\n"
        "- [System](system/index.md): how this memory works\n"
    ),
    "system/index.md": (
        "---\ntitle: System\n---\n\n# System\n\n"
        "- [definition.md](definition.md): how this memory is kept and organized.\n"
    ),
    "system/definition.md": concept(
        "system",
        "How this memory works",
        """
These Markdown files are the durable memory of the family and of its bakery, in
Cantonese, German or English: whichever language a note was first written in. What the
files say wins over anyone's recollection; correct a wrong fact where it is written.

## Layout

- One concept per file: a person, a customer, a schedule, a health record, a tax paper.
- Folders by subject: 家庭 and familie for the family, 健康 and health for appointments
  and medicine, 稅務 and steuern for tax paperwork, 生意 and bakery for the shop's
  customers, suppliers and invoices, home for the household.
- Every folder has an index.md with one link per file and a few words on it.
- Dates are written YYYY-MM-DD; times are Hong Kong time unless a note says otherwise
  (the German notes about Freiburg use German time).

## Daily notes

What happened today goes to daily/YYYY-MM-DD.md; what lasts moves into a concept file.
""",
    ),
    # 家庭: the family, in Cantonese
    "家庭/index.md": folder_index(
        "家庭",
        [
            ("每週時間表", "時間表.md", "：興趣班、補習"),
            ("阿嫲", "阿嫲.md", ""),
            ("學校", "學校.md", "：校車、家長日"),
        ],
    ),
    "家庭/時間表.md": concept(
        "schedule",
        "每週時間表",
        """
- 星期一：阿晴放學後去中文補習，5點半到7點，喺太子道嗰間補習社。
- 星期二：下午4點小提琴課，陳老師，旺角琴行三樓。記得帶琴譜同松香。
- 星期四：細佬4點半游水班，喺西貢戶外康樂中心，要帶泳帽同蛙鏡。
- 星期六朝早：全家去街市買餸，之後去飲茶。
- 星期日：休息，有時返阿嫲屋企食飯。
""",
    ),
    "家庭/阿嫲.md": concept(
        "person",
        "阿嫲",
        """
阿嫲住喺深水埗，今年八十二歲。佢生日係農曆八月十五，同中秋節同一日，每年全家一齊
食飯慶祝。鍾意飲普洱，唔食牛肉。朝早九點之前唔好打電話畀佢。
""",
    ),
    "家庭/學校.md": concept(
        "place",
        "學校",
        """
阿晴讀小四，學校喺西貢市中心。校車朝早7點15分喺樓下接。家長日係11月22號下晝2點，
要同班主任李老師傾吓功課同默書成績。陸運會喺12月，要準備運動服。
""",
    ),
    # 健康: health, in Cantonese
    "健康/index.md": folder_index(
        "健康",
        [
            ("覆診記錄", "覆診記錄.md", ""),
            ("疫苗", "疫苗.md", ""),
            ("牙醫", "牙醫.md", ""),
            ("敏感", "敏感.md", ""),
        ],
    ),
    "健康/覆診記錄.md": concept(
        "health",
        "覆診記錄",
        """
阿爸（Jonas）有高血壓，每日食一粒降血壓藥，朝早食。家庭醫生係黃醫生，診所喺西貢
大街。下次覆診：2026年12月3號上晝10點，要空肚抽血。上次量血壓係135/85。
""",
    ),
    "健康/疫苗.md": concept(
        "health",
        "疫苗",
        """
細佬今年六歲，要打流感針同埋小一嘅加強劑（白喉、破傷風、百日咳）。阿晴嘅針卡擺喺
書枱第二格抽屜。學校十月會安排打針，要交同意書。
""",
    ),
    "健康/牙醫.md": concept(
        "health",
        "牙醫",
        """
全家每半年洗牙一次，去將軍澳何牙醫診所。細佬有一隻蛀牙要補。下次洗牙：2027年1月。
""",
    ),
    "健康/敏感.md": concept(
        "health",
        "敏感",
        """
細佬對花生同腰果敏感，食咗會出風癩同氣喘。出街一定要帶腎上腺素筆（EpiPen），學校同
補習社都知。阿晴對貓毛有少少敏感。
""",
    ),
    # 稅務 and 生意: tax and the bakery's regulars, in Cantonese
    "稅務/index.md": folder_index("稅務", [("報稅", "報稅.md", "")]),
    "稅務/報稅.md": concept(
        "tax",
        "報稅",
        """
美玲嘅薪俸稅：每年五月收到報稅表，一個月內要交返。可以扣除強積金供款、進修開支同
居所貸款利息。暫繳稅分兩期，一月同四月交。收據擺喺寫住「稅」嘅文件夾。
""",
    ),
    "生意/index.md": folder_index("生意", [("熟客", "熟客.md", "")]),
    "生意/熟客.md": concept(
        "customers",
        "熟客",
        """
- 陳太：逢星期五訂兩個菠蘿包同一條提子包，自己過嚟攞。
- 海景茶餐廳：每朝7點前送50個餐包，月尾先找數。
- 李生：只要無糖全麥包，佢有糖尿病。
""",
    ),
    # familie and steuern: the family and its tax paperwork, in German
    "familie/index.md": folder_index(
        "Familie",
        [
            ("Wochenplan", "wochenplan.md", ""),
            ("Kinderarzt", "kinderarzt.md", ""),
            ("Großeltern in Freiburg", "großeltern.md", ""),
            ("Sommer in Freiburg", "sommer-in-freiburg.md", ""),
        ],
    ),
    "familie/wochenplan.md": concept(
        "schedule",
        "Wochenplan",
        """
- Montag: Leo hat um 17 Uhr Fußballtraining auf dem Sportplatz hinter der Schule.
- Mittwoch: Klavierunterricht für Ching bei Frau Albrecht, online, 18 Uhr.
- Freitag: Jonas holt beide Kinder ab.
- Der Elternabend der Grundschule ist am Donnerstag, 20. November, um 19 Uhr.
""",
    ),
    "familie/kinderarzt.md": concept(
        "health",
        "Kinderarzt",
        """
Kinderarztpraxis Dr. Brandt in Freiburg, wenn wir im Sommer dort sind. Die
Vorsorgeuntersuchung U10 für Leo ist fällig. Der Impfpass liegt im blauen Ordner;
Chings Masernimpfung ist vollständig, beide Dosen.
""",
    ),
    "familie/großeltern.md": concept(
        "person",
        "Großeltern in Freiburg",
        """
Oma Gisela und Opa Horst wohnen in Freiburg-Wiehre. Oma hat am 14. März Geburtstag,
Opa am 2. September. Sie freuen sich über Fotos der Kinder. Wir telefonieren sonntags um
15 Uhr deutscher Zeit.
""",
    ),
    "familie/sommer-in-freiburg.md": concept(
        "plan",
        "Sommer in Freiburg",
        """
Im Juli bei den Großeltern. Jonas hat einen Termin beim Zahnarzt (Kontrolle und
Reinigung) am 8. Juli um 9:30. Die Fahrräder vorher zur Werkstatt bringen. Rückflug
nach Hongkong am 9. August.
""",
    ),
    "steuern/index.md": folder_index(
        "Steuern",
        [
            ("Unterlagen 2025", "unterlagen-2025.md", ""),
            ("Vermietung", "vermietung.md", ""),
            ("Vorsorge", "vorsorge.md", ""),
        ],
    ),
    "steuern/unterlagen-2025.md": concept(
        "tax",
        "Unterlagen 2025",
        """
Für die Steuererklärungsvorbereitung 2025 sammeln: Lohnsteuerbescheinigung,
Spendenquittungen, Nachweise über Handwerkerleistungen und die Kontoauszüge mit den
Einnahmen aus Freiburg. Steuerberaterin ist Frau Kessler; die Abgabefrist über sie ist
der 30. April 2027.
""",
    ),
    "steuern/vermietung.md": concept(
        "tax",
        "Vermietung",
        """
Die Eigentumswohnung in Freiburg ist an Familie Yılmaz vermietet, Kaltmiete 890 Euro.
Die Nebenkostenabrechnung muss bis Ende Juni raus. Das Hausgeld geht monatlich an die
Hausverwaltung.
""",
    ),
    "steuern/vorsorge.md": concept(
        "tax",
        "Vorsorge",
        """
Die Beiträge zur Krankenversicherung und Pflegeversicherung als Vorsorgeaufwendungen
eintragen. Haftpflichtversicherung und Hausratversicherung laufen über denselben
Anbieter; die Vertragsnummern stehen im grünen Ordner.
""",
    ),
    # bakery, health and home, in English
    "bakery/index.md": folder_index(
        "Bakery",
        [
            ("Customers", "customers/index.md", ""),
            ("Suppliers", "suppliers.md", ""),
            ("Invoices", "invoices.md", ""),
            ("Opening hours", "opening-hours.md", ""),
            ("Profits tax", "profits-tax.md", ""),
        ],
    ),
    "bakery/customers/index.md": folder_index(
        "Customers",
        [
            ("Sai Kung Yacht Club", "yacht-club.md", ": Saturday bread"),
            ("Mrs. Okafor", "okafor.md", ": wedding cake"),
            ("The Green Spoon", "green-spoon.md", ": vegan restaurant"),
        ],
    ),
    "bakery/customers/yacht-club.md": concept(
        "customer",
        "Sai Kung Yacht Club",
        """
Standing order of twelve sourdough loaves every Saturday, collected at 8:00 by their
driver. Invoiced monthly, payment within 30 days. Contact: Peter Hughes, the catering
manager.
""",
    ),
    "bakery/customers/okafor.md": concept(
        "customer",
        "Mrs. Okafor",
        """
Wedding cake for 80 guests on 14 February: three tiers, lemon sponge with elderflower
cream. A deposit of HK$1,500 is paid; the rest is due on delivery.
""",
    ),
    "bakery/customers/green-spoon.md": concept(
        "customer",
        "The Green Spoon",
        """
A vegan restaurant on Yi Chun Street. They take egg-free brioche buns on Tuesdays and
Fridays, forty each time, and pay cash on delivery.
""",
    ),
    "bakery/suppliers.md": concept(
        "supplier",
        "Suppliers",
        """
- Flour: Kowloon Mills, stone-ground, 25 kg sacks, delivered on Mondays.
- Butter and cream: a dairy wholesaler in Tsuen Wan, ordered by phone on Thursdays.
- Packaging: paper bags and cake boxes from a shop in Sham Shui Po.
""",
    ),
    "bakery/invoices.md": concept(
        "accounts",
        "Invoices",
        """
Open: the Yacht Club's October invoice, HK$4,320; a reminder went out on 2 November.
Settled: Harbour Fair stall fee. Every invoice is numbered YYYY-NNN and kept as a PDF.
""",
    ),
    "bakery/opening-hours.md": concept(
        "shop",
        "Opening hours",
        """
Open Tuesday to Sunday, 7:00 to 18:00; closed on Mondays for baking and cleaning. On
public holidays the shop closes at 14:00.
""",
    ),
    "bakery/profits-tax.md": concept(
        "tax",
        "Profits tax",
        """
The bakery's profits tax return comes in April and is filed by our accountant, Mr.
Chan, within a month. Keep the receipts for the new oven: it counts as a depreciation
allowance.
""",
    ),
    "health/index.md": folder_index(
        "Health",
        [("Physiotherapy", "physiotherapy.md", ""), ("Eyes", "eyes.md", "")],
    ),
    "health/physiotherapy.md": concept(
        "health",
        "Physiotherapy",
        """
Mei-ling's left knee after the fall on the hiking trail: six sessions at Sai Kung Physio,
Wednesdays at 12:30. Exercises every evening: squats against the wall, ten at a time.
""",
    ),
    "health/eyes.md": concept(
        "health",
        "Eyes",
        """
Ching is short-sighted. New glasses since September; the optician wants to check her
again in March.
""",
    ),
    "home/index.md": folder_index(
        "Home",
        [("School run", "school-run.md", ""), ("Helper", "helper.md", "")],
    ),
    "home/school-run.md": concept(
        "routine",
        "School run",
        """
Monday to Thursday Mei-ling drives the children; on Fridays Jonas walks them to the bus
stop. The school bus leaves at 7:15 sharp.
""",
    ),
    "home/helper.md": concept(
        "person",
        "Rosa",
        """
Rosa works for us Monday to Saturday, with Sunday off. Her contract is renewed every two
years through the agency; the next renewal is due in May.
""",
    ),
    # daily notes, in whichever language they were written
    "daily/2026-11-10.md": (
        '---\ntype: daily-note\ndate: "2026-11-10"\n---\n\n# 2026-11-10\n\n'
        "- 同陳老師傾咗阿晴嘅小提琴考試：明年三月考五級。\n"
        "- The oven thermostat was repaired.\n"
    ),
    "daily/2026-11-12.md": (
        '---\ntype: daily-note\ndate: "2026-11-12"\n---\n\n# 2026-11-12\n\n'
        "- The Yacht Club paid half of the October invoice; the rest next week.\n"
        "- Jonas hat die Steuerberaterin angerufen: Gespräch am 9. Dezember.\n"
    ),
}

# (question, the file that answers it, what it tests), per language
QUESTIONS: dict[str, list[tuple[str, str, str]]] = {
    "yue": [
        ("小提琴課", "memory/家庭/時間表.md", "words inside a run of characters"),
        ("醫生", "memory/健康/覆診記錄.md", "a two-character word"),
        ("阿爸幾時覆診", "memory/健康/覆診記錄.md", "a question"),
        ("花生", "memory/健康/敏感.md", "a two-character word"),
        ("細佬食咗花生點算", "memory/健康/敏感.md", "a question"),
        ("洗牙", "memory/健康/牙醫.md", "a two-character word"),
        ("報稅", "memory/稅務/報稅.md", "a two-character word"),
        ("薪俸稅幾時要交", "memory/稅務/報稅.md", "a question"),
        ("陳太星期五訂咩包", "memory/生意/熟客.md", "a question"),
        ("家長日", "memory/家庭/學校.md", "a word"),
        ("阿嫲生日", "memory/家庭/阿嫲.md", "words inside a run of characters"),
        ("游水班", "memory/家庭/時間表.md", "a word"),
        ("流感針", "memory/健康/疫苗.md", "a word"),
        ("邊個有糖尿病", "memory/生意/熟客.md", "a question"),
    ],
    "de": [
        ("Steuererklärung", "memory/steuern/unterlagen-2025.md", "part of a compound"),
        ("Versicherung", "memory/steuern/vorsorge.md", "the head of compounds"),
        ("Zahnarzttermin", "memory/familie/sommer-in-freiburg.md", "a compound, parts apart"),
        ("Wann ist der Elternabend?", "memory/familie/wochenplan.md", "a question"),
        ("Arzt für die Kinder", "memory/familie/kinderarzt.md", "parts of a compound"),
        ("Nebenkosten", "memory/steuern/vermietung.md", "part of a compound"),
        ("Klavier", "memory/familie/wochenplan.md", "part of a compound"),
        ("Impfung", "memory/familie/kinderarzt.md", "the head of a compound"),
        ("Geburtstag von Oma", "memory/familie/großeltern.md", "keywords"),
        ("Wie hoch ist die Miete?", "memory/steuern/vermietung.md", "the head of a compound"),
        ("Steuerberater Frist", "memory/steuern/unterlagen-2025.md", "parts of compounds"),
        ("Telefon mit Oma und Opa", "memory/familie/großeltern.md", "a word's stem"),
    ],
    "en": [
        ("wedding cake deposit", "memory/bakery/customers/okafor.md", "keywords"),
        ("who orders sourdough on Saturdays", "memory/bakery/customers/yacht-club.md",
         "a question"),
        ("egg-free buns", "memory/bakery/customers/green-spoon.md", "keywords"),
        ("flour delivery", "memory/bakery/suppliers.md", "keywords"),
        ("unpaid invoice reminder", "memory/bakery/invoices.md", "keywords"),
        ("is the bakery open on Mondays", "memory/bakery/opening-hours.md", "a question"),
        ("profits tax return", "memory/bakery/profits-tax.md", "keywords"),
        ("knee physiotherapy sessions", "memory/health/physiotherapy.md", "keywords"),
        ("new glasses for Ching", "memory/health/eyes.md", "keywords"),
        ("who takes the children to the bus on Friday", "memory/home/school-run.md",
         "a question"),
        ("when is the helper's contract renewed", "memory/home/helper.md", "a question"),
        ("vegan restaurant order", "memory/bakery/customers/green-spoon.md", "keywords"),
    ],
}  # fmt: skip

LANGUAGES = {"yue": "Cantonese", "de": "German", "en": "English"}

# Files the context gets anyway, or that only link: a search should rank them last.
MAPS = {
    "memory/index.md",
    "memory/system/definition.md",
    *(f"memory/{rel}" for rel in FILES if rel.endswith("/index.md")),
}


def write_corpus(memory_dir: Path) -> None:
    for rel, text in FILES.items():
        path = memory_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

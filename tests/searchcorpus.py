"""A small memory tree for search tests and benchmarks: concept files, daily notes and an
import, with queries whose right answer is known. Written for these tests."""

from __future__ import annotations

from pathlib import Path


def concept(kind: str, title: str, body: str) -> str:
    return f"---\ntype: {kind}\ntitle: {title}\n---\n\n# {title}\n\n{body.strip()}\n"


FILES: dict[str, str] = {
    "index.md": (
        "# Memory\n\n## Core Memory\n\n- [People](people/index.md)\n- [Projects](projects/index.md)"
        "\n- [Places](places/index.md)\n- [Preferences](preferences/index.md)\n"
    ),
    "people/index.md": "# People\n\n- [Ada](ada-lovelace.md)\n- [Grace](grace-hopper.md)\n",
    "people/ada-lovelace.md": concept(
        "person",
        "Ada Lovelace",
        "Ada wrote the first published program, for Babbage's Analytical Engine. She is "
        "the family's reference for anything about mathematics homework.",
    ),
    "people/grace-hopper.md": concept(
        "person",
        "Grace Hopper",
        "Grace built the first compiler and popularised the word debugging after a moth "
        "was found in a relay. She runs the Tuesday robotics club at school.",
    ),
    "people/dentist.md": concept(
        "person",
        "Dr. Okafor",
        "The family dentist. Practice on Elm Street, phone 555-0142. Check-ups every six "
        "months; the next one is booked for the children in March.",
    ),
    "projects/index.md": (
        "# Projects\n\n- [Kitchen](kitchen-renovation.md)\n- [Taxes](taxes-2026.md)\n"
    ),
    "projects/kitchen-renovation.md": concept(
        "project",
        "Kitchen renovation",
        "Budget 18,000 EUR. The contractor starts on 3 February. Cabinets are oak; the "
        "worktop is quartz. Open question: induction hob or gas.",
    ),
    "projects/taxes-2026.md": concept(
        "project",
        "Taxes 2026",
        "The tax return is due on 31 July 2026 (Europe/Lisbon). Receipts for the "
        "renovation are deductible; keep invoices in files/taxes/.",
    ),
    "projects/garden.md": concept(
        "project",
        "Vegetable garden",
        "Tomatoes and courgettes in the south bed; water every second evening in summer. "
        "Compost bin behind the shed.",
    ),
    "places/index.md": "# Places\n\n- [School](school.md)\n- [Holiday house](holiday-house.md)\n",
    "places/school.md": concept(
        "place",
        "School",
        "Escola Primaria do Bairro. Pick-up at 15:30 on weekdays, 13:00 on Wednesdays. "
        "The parents' meeting is on the first Monday of each term.",
    ),
    "places/holiday-house.md": concept(
        "place",
        "Holiday house",
        "A rented cottage near Aljezur for the first two weeks of August. The key is "
        "with the neighbour, Mrs. Costa. Wi-Fi password is on the fridge.",
    ),
    "preferences/index.md": "# Preferences\n\n- [Food](food.md)\n- [Deadlines](deadlines.md)\n",
    "preferences/food.md": concept(
        "preference",
        "Food",
        "Nobody eats coriander. The youngest is allergic to peanuts: always check labels. "
        "Friday is pizza night.",
    ),
    "preferences/deadlines.md": concept(
        "preference",
        "Deadlines",
        "Always give a deadline with its timezone. Reminders go out two days before.",
    ),
    "daily/2026-11-02.md": (
        '---\ntype: daily-note\ndate: "2026-11-02"\n---\n\n# 2026-11-02\n\n'
        "- Car inspection passed; the next is due in November 2027.\n"
        "- Ordered a new bicycle helmet for the eldest.\n"
    ),
    "daily/2026-11-15.md": (
        '---\ntype: daily-note\ndate: "2026-11-15"\n---\n\n# 2026-11-15\n\n'
        "- Boiler service booked for 2 December, technician from ThermoFix.\n"
        "- Library books due back on Saturday.\n"
    ),
    "imports/old-assistant/MEMORY.md": (
        "# Imported notes\n\n"
        "## Insurance\n\nHome insurance renews every April with Fidelidade; policy "
        "number HI-88231.\n\n"
        "## Piano\n\nPiano lessons on Thursdays at 17:00 with Ms. Duarte.\n"
    ),
}

# (query, the file that must rank first)
QUERIES: list[tuple[str, str]] = [
    ("who wrote the first program", "memory/people/ada-lovelace.md"),
    ("compiler debugging moth", "memory/people/grace-hopper.md"),
    ("dentist phone number", "memory/people/dentist.md"),
    ("kitchen budget contractor", "memory/projects/kitchen-renovation.md"),
    ("when is the tax return due", "memory/projects/taxes-2026.md"),
    ("watering tomatoes", "memory/projects/garden.md"),
    ("school pick-up time", "memory/places/school.md"),
    ("holiday cottage key", "memory/places/holiday-house.md"),
    ("peanut allergy", "memory/preferences/food.md"),
    ("deadlines timezone", "memory/preferences/deadlines.md"),
    ("car inspection", "memory/daily/2026-11-02.md"),
    ("boiler service", "memory/daily/2026-11-15.md"),
    ("insurance policy number", "memory/imports/old-assistant/MEMORY.md"),
    ("piano lessons", "memory/imports/old-assistant/MEMORY.md"),
    ("robotics club", "memory/people/grace-hopper.md"),
    ("quartz worktop", "memory/projects/kitchen-renovation.md"),
]

# The same files asked for in other words: what keyword ranking alone tends to miss.
PARAPHRASES: list[tuple[str, str]] = [
    ("who takes care of our teeth", "memory/people/dentist.md"),
    ("money for redoing the cooking area", "memory/projects/kitchen-renovation.md"),
    ("vacation rental in summer", "memory/places/holiday-house.md"),
    ("what must the youngest never eat", "memory/preferences/food.md"),
    ("when do I collect the kids from class", "memory/places/school.md"),
    ("who invented the code translator", "memory/people/grace-hopper.md"),
    ("who programmed Babbage's machine", "memory/people/ada-lovelace.md"),
    ("heating repair appointment", "memory/daily/2026-11-15.md"),
    ("vehicle roadworthiness check", "memory/daily/2026-11-02.md"),
    ("music class schedule", "memory/imports/old-assistant/MEMORY.md"),
    ("home cover renewal", "memory/imports/old-assistant/MEMORY.md"),
    ("growing vegetables", "memory/projects/garden.md"),
]


def write_corpus(memory_dir: Path) -> None:
    for rel, text in FILES.items():
        path = memory_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

"""Fuzzing package names and requirements (orchestrator/groups/packages.py): they come
from group.yaml and from a model's package request in a chat, and become arguments of
apt and pip. debian_problem and python_problem say why a value is refused or return
None, never raising; an accepted Debian name follows Debian Policy 5.6.7 and an
accepted Python requirement is "a name, extras and a version specifier; no URL, path
or option" (the module's docstring), which pip cannot read as an option. What
set_packages writes into group.yaml loads back the same.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st
from packaging.requirements import Requirement

from orchestrator.errors import InvalidConfig
from orchestrator.groups.config import GroupConfig, load_group_config, set_packages
from orchestrator.groups.packages import check_names, debian_problem, python_problem
from orchestrator.templates import render
from orchestrator.versions import GROUP_FILE_VERSION
from tests.fuzzing import fuzz, mutated_text

DEBIAN_SEEDS = ["tree", "jq", "libssl3", "g++", "python3.11", "fonts-dejavu-core", "x"]
PYTHON_SEEDS = [
    "requests", "rich==13.7.1", "requests[socks]>=2.31,<3", "Django ~= 5.0", "a.b_c-d",
    "numpy (>=1.26)", "pkg===1.0", "name!=2.*", "x[a,b]",
]  # fmt: skip
values = st.one_of(
    st.none(), st.integers(), st.lists(st.text(max_size=4), max_size=2), st.text(max_size=30)
)
debian_names = st.one_of(mutated_text(DEBIAN_SEEDS, max_edits=3), values)
python_texts = st.one_of(
    mutated_text(PYTHON_SEEDS, max_edits=4),
    values,
    st.sampled_from(
        ["-r /etc/shadow", "--index-url=http://x", " -e .", "pkg @ https://x/y.whl",
         "pkg; python_version<'3'", "./local", "pkg\n--extra-index-url x", "pkg#frag",
         "pkg[", "a" * 201, "pkg (>=1", "@", "pkg>=1.0.dev0+local"]
    ),
)  # fmt: skip


@fuzz(400)
@given(name=debian_names)
@example(name="-oAPT::Update::Pre-Invoke::=touch /tmp/x")
@example(name="../x")
@example(name="tree\n")
def test_a_debian_name_is_judged_without_raising(name: object) -> None:
    problem = debian_problem(name)
    if problem is None:
        assert isinstance(name, str)
        assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]{1,62}", name), name
    else:
        assert problem.startswith("got ")


@fuzz(400)
@given(text=python_texts)
@example(text="pkg\n--extra-index-url x")
@example(text="numpy (>=1.26)")
@example(text=" requests")
@example(text="requests ")
def test_a_python_requirement_is_judged_without_raising(text: object) -> None:
    problem = python_problem(text)
    if problem is not None:
        assert problem.startswith("got ")
        return
    assert isinstance(text, str)
    requirement = Requirement(text)  # the readers of an accepted one (relay, CLI) parse it
    assert requirement.url is None and requirement.marker is None
    assert not text.strip().startswith("-")  # pip reads no option from it
    assert not any(c in text for c in "/\\@:;#\n\r\t")


def template() -> str:
    return render(
        "group.yaml.j2",
        config=GroupConfig(name="Fam"),
        version=GROUP_FILE_VERSION,
        dumps=lambda v: json.dumps(v, ensure_ascii=False),
    )


@fuzz(150)
@given(
    debian=st.lists(st.sampled_from(DEBIAN_SEEDS) | debian_names, max_size=4),
    python=st.lists(st.sampled_from(PYTHON_SEEDS) | python_texts, max_size=4),
    section=st.booleans(),
)
@example(debian=["tree", "g++"], python=["requests[socks]>=2.31,<3", "numpy (>=1.26)"],
         section=True)  # fmt: skip
@example(debian=[], python=[], section=False)
def test_what_set_packages_writes_loads_back(
    debian: list[object], python: list[object], section: bool
) -> None:
    try:
        check_names(debian, python)
    except InvalidConfig as exc:
        assert exc.message.startswith("packages.")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "group.yaml"
        text = template()
        if not section:  # a group.yaml from before packages: the section is added
            text = text[: text.index("# Packages for this group's own image")]
        path.write_text(text)
        set_packages(path, tuple(map(str, debian)), tuple(map(str, python)))
        packages = load_group_config(path).packages
        # a name given twice is kept once (config._packages: dict.fromkeys)
        assert packages.debian == tuple(dict.fromkeys(map(str, debian)))
        assert packages.python == tuple(dict.fromkeys(map(str, python)))

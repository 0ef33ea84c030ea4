"""Exact behaviour of two small package modules: the shipped Jinja2 templates
(templates/__init__.py: read from the package, strict about missing values, trailing
newline kept, nothing escaped) and the provider adapters by kind
(relay/providers/__init__.py)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from jinja2 import meta

from orchestrator.config.providers import ProviderDef
from orchestrator.relay.providers import ADAPTERS, adapter_for
from orchestrator.relay.providers.anthropic import AnthropicProvider
from orchestrator.relay.providers.openai import OpenAIProvider
from orchestrator.templates import render

TEMPLATES = Path(__file__).resolve().parent.parent / "orchestrator" / "templates"


def test_a_template_renders_as_its_file_with_the_trailing_newline_kept() -> None:
    text = render("memory/index.md.j2")
    assert text == (TEMPLATES / "memory" / "index.md.j2").read_text(encoding="utf-8")
    assert text.endswith("itself.\n")


def test_values_are_put_in_as_they_are_not_html_escaped() -> None:
    text = render(
        "agent/instructions.md.j2",
        agent_dir="<dir & co>",
        prepend="",
        learned="a < b & \"c\" 'd'",
        block="",
        skills="",
        provider="p",
        model="m",
        source="s",
        created="c",
        **_more_values(),
    )
    assert "<dir & co>" in text
    assert "a < b & \"c\" 'd'" in text
    assert "&lt;" not in text and "&amp;" not in text


def _more_values() -> dict[str, object]:
    """Every other name the instructions template uses, as an empty text."""
    env = jinja2.Environment()
    source = (TEMPLATES / "agent" / "instructions.md.j2").read_text(encoding="utf-8")
    names = meta.find_undeclared_variables(env.parse(source))
    given = {"agent_dir", "prepend", "learned", "block", "skills", "provider", "model"}
    return {n: "" for n in names - given - {"source", "created"}}


def test_a_value_the_template_needs_and_was_not_given_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("agent/instructions.md.j2")


def test_a_template_not_in_the_package_is_not_found() -> None:
    with pytest.raises(jinja2.TemplateNotFound):
        render("missing.j2")


def test_each_kind_names_its_adapter_class() -> None:
    assert ADAPTERS == {
        "anthropic": "orchestrator.relay.providers.anthropic:AnthropicProvider",
        "openai": "orchestrator.relay.providers.openai:OpenAIProvider",
    }


@pytest.mark.parametrize(
    ("kind", "cls"), [("anthropic", AnthropicProvider), ("openai", OpenAIProvider)]
)
def test_the_adapter_of_a_kind_is_made_with_the_definition_and_key(kind: str, cls: type) -> None:
    definition = ProviderDef("p", kind, base_url="http://model.test", key_env="K")
    provider = adapter_for(definition, "sekrit")
    assert type(provider) is cls
    assert provider.definition is definition
    client = provider.client  # type: ignore[attr-defined]
    assert client.api_key == "sekrit"
    client.close()


def test_a_kind_without_adapter_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        adapter_for(ProviderDef("p", "other"), None)

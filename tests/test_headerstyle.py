"""The mail header spelling check of the suite (tests/headerstyle.py)."""

from __future__ import annotations

import pytest

from orchestrator.channels.email.reading import Mail, read_mail
from tests.headerstyle import HeaderWatch, misspelled
from tests.test_email_mail import mail_bytes


@pytest.mark.parametrize("name", ["Auto-Submitted", "Return-Path", "Message-ID", "X-Autoreply"])
def test_a_name_as_the_rfcs_spell_it_passes(name: str) -> None:
    assert misspelled(name) is False


@pytest.mark.parametrize("name", ["auto-submitted", "RETURN-PATH", "precedence", "X-"])
def test_a_name_in_one_case_is_misspelled(name: str) -> None:
    assert misspelled(name) is True


def test_the_watch_finds_the_same_header_and_records_a_misspelled_name() -> None:
    mail = read_mail(mail_bytes(headers={"Auto-Submitted": "auto-replied"}))
    watch = HeaderWatch()
    header = watch.wrap(getattr(Mail.header, "__wrapped__", Mail.header))  # not the suite's watch
    assert header(mail, "Auto-Submitted") == "auto-replied"
    assert watch.take() == []
    assert header(mail, "auto-submitted") == "auto-replied"
    assert header(mail, "PRECEDENCE") is None
    assert watch.take() == ["auto-submitted", "PRECEDENCE"]
    assert watch.take() == []

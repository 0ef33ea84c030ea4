"""Discord: a bot on the gateway (``kind.py`` its accounts, ``adapter.py`` the link)."""

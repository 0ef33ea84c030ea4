"""Telegram: a bot polling the Bot API (``kind`` describes its accounts, ``adapter``
speaks the API)."""

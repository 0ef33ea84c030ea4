"""Slack: an app over Socket Mode (``kind.py`` its accounts, ``adapter.py`` the link,
``mrkdwn.py`` its text in and out)."""

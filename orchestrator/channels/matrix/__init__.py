"""Matrix: a bot user of a homeserver's client-server API (``kind`` describes its
accounts, ``adapter`` speaks the API)."""

"""The state database: its connection and schema versions (``db``, ``schema``) and one
typed repository per concern: messages, replies and pauses (``messages``), held
requests (``held``), tasks (``tasks``), chats, bindings, pairings and the chat apps'
claims (``chats``), usage (``usage``). No SQL is written outside this package (the
memory search index and the memory history keep files of their own)."""

"""Agent Skills: folders with a ``SKILL.md`` (YAML frontmatter ``name`` and
``description``, a Markdown body) and any scripts or reference files.

``manifest`` reads a SKILL.md (stdlib and yaml only: the container's runner uses it);
``validate`` checks a folder the operator installs, ``catalog`` finds the built-in and
installed skills of a home and installs or removes them (host only).
"""

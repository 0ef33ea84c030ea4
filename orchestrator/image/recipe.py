"""What the offline base image is made of (the Debian suite, its packages, what is left
out, the import's changes) and the hash and tag that name it. Kept apart from the build
so that a build with nothing to do is known without loading the build's code."""

from __future__ import annotations

import hashlib
import json

SUITE = "bookworm"
# What the agent's shell has (bash, coreutils, findutils, grep, sed and diffutils are
# Debian's essential set): Python and its standard library; gawk for awk scripts; file
# to tell what a file is; less; git for versioned work (it brings perl); jq for JSON;
# ripgrep for fast search; sqlite3 for queries over data; zip, unzip and xz-utils for
# archives; procps for ps and kill by name; ca-certificates for Python's TLS.
PACKAGES = (
    "python3",
    "ca-certificates",
    "gawk",
    "file",
    "less",
    "git",
    "jq",
    "ripgrep",
    "sqlite3",
    "zip",
    "unzip",
    "xz-utils",
    "procps",
    # the shell reaches the web only through the egress gate (HTTP_PROXY), when the
    # group's policy allows it
    "curl",
)
# Left out of the image: documentation, and what cannot work without a network (git's
# transports, daemon and mail sender) or builds perl extensions (perl's C headers).
EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/locale/*",
    "/usr/lib/git-core/git-remote-http*",
    "/usr/lib/git-core/git-remote-ftp*",
    "/usr/lib/git-core/git-http-*",
    "/usr/lib/git-core/git-daemon",
    "/usr/lib/git-core/git-imap-send",
    "/usr/lib/git-core/git-shell",
    "/usr/lib/git-core/scalar",
    "/usr/bin/scalar",
    "/usr/bin/git-shell",
    "/usr/lib/*/perl/*/CORE/*",
)
BASE_REPOSITORY = "orchestrator-base"
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)


def recipe_hash(extra: tuple[str, ...] = ()) -> str:
    """The offline base's recipe; ``extra`` packages (a group's) make another base."""
    recipe = {
        "suite": SUITE,
        "packages": sorted({*PACKAGES, *extra}),
        "excludes": EXCLUDES,
        "changes": IMPORT_CHANGES,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def base_tag(extra: tuple[str, ...] = ()) -> str:
    return f"{BASE_REPOSITORY}:{SUITE}-{recipe_hash(extra)[:12]}"

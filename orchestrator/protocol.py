"""What the host and a group's container share: the turn the host sends and the answer
the runner gives, the names of the requests a runner makes during a turn, and the
constants both sides must agree on. Imports nothing host-side (the image installs the
same package, so this exists once)."""

from __future__ import annotations

OFFLINE = "offline"  # the embedded provider: it runs in the container; no definition

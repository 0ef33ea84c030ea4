"""Images: the offline base built from Debian packages, and the agent image on top of it."""

"""A group's memory: the OKF v0.1 tree of Markdown concept files (scaffold, lint)."""

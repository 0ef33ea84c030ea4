"""What runs inside a group's container: the runner, sessions, hooks, tools, providers.

Nothing here imports the Docker SDK or host-only modules.
"""

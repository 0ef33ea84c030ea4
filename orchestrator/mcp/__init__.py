"""Model Context Protocol servers: the names their tools take for the model, the pins
that hold a server to the tools an operator approved, what a call's result becomes for
the model (``tools``), and a blocking link to one server over the official SDK
(``link``), used by the runner for a group's stdio servers and by the host for remote
ones. Imports nothing host-only: the agent image installs the same package."""

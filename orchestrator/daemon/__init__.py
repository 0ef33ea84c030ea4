"""The daemon: intake, dispatch and delivery (``core``), the scheduler loop
(``scheduler``), and what an older release left behind (``upgrade``). Running it as a
process (serve, up, down) and ``orchestrator doctor`` are ``orchestrator.service``."""

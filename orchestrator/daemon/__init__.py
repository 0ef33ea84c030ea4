"""The daemon: intake, dispatch and delivery (``core``), the scheduler loop
(``scheduler``), what an older release left behind (``upgrade``), running it as a
service (``service``) and the checks of ``orchestrator doctor`` (``doctor``)."""

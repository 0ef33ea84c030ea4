"""Request ops: one small class each, behind one protocol (``relay.turn.Op``), found by
name in ``relay.turn.OPS``. An op has ``cap(turn)`` (the largest request it accepts, in
bytes) and ``handle(turn, frame)`` (the answer, without ``req``); a request that breaks
its rules raises RelayViolation (``relay.errors``), which fails that turn only. Adding an
op adds a module here and a line in OPS, and touches nothing else."""

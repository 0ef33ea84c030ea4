"""The host relay: what a group's runner may ask of the host during a turn.

One small module per request op in ``ops/`` (found through a registry), one adapter per
provider kind in ``providers/`` (on the host only: the SDKs are never in the agent image),
budgets in ``budget``, usage in ``usage``. ``turn.TurnRelay`` answers one turn's
requests. Provider definitions are a section of the configuration
(``orchestrator.config.providers``); their keys come from ``orchestrator.secrets``.
"""

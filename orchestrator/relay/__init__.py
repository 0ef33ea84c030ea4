"""The host relay: what a group's runner may ask of the host during a turn.

One small module per request op in ``ops/`` (found through a registry), one adapter per
provider kind in ``providers/`` (on the host only: the SDKs are never in the agent image),
credentials and provider definitions in ``definitions``, budgets in ``budget``, usage in
``usage``. ``turn.TurnRelay`` answers one turn's requests. Import nothing heavy here:
configuration loading imports ``definitions``.
"""

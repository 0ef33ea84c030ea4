"""The chat-app core: one channel per kind of account (``channel``), one ``ChatAccount``
per account (``core``: routing, the outbound state machine, typing, health), and the
``ChatAdapter`` each app supplies (``adapter``)."""

from orchestrator.channels.chatapp.adapter import ChatAdapter, Received, Refusal
from orchestrator.channels.chatapp.channel import ChatAppChannel
from orchestrator.channels.chatapp.core import AdapterBase

__all__ = ["AdapterBase", "ChatAdapter", "ChatAppChannel", "Received", "Refusal"]

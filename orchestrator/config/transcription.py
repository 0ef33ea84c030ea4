"""``transcription`` of orchestrator.yaml: the transcribers the host runs voice notes and
audio files through before a turn (group.yaml ``media.transcribe`` picks one).

    transcription:
      cloud:
        kind: openai                        # an OpenAI-compatible /audio/transcriptions
        base_url: https://api.openai.com/v1 # the default; or a faster-whisper or
                                            # whisper.cpp server, LocalAI ...
        key_env: OPENAI_API_KEY             # or key_secret: NAME; none for a server without
        model: whisper-1                    # the default
        price_per_minute: 0.006             # optional, in `currency`: the cost in usage
        max_bytes: 25m                      # the endpoint's upload limit (default 25m)
      here:
        kind: local                         # faster-whisper (pip install
                                            # 'orchestrator[transcribe-local]')
        model_dir: /srv/models/whisper-small  # a CTranslate2 Whisper model folder
        compute_type: int8                  # default int8 (CPU)
        threads: 2                          # CPU threads of one transcription (default 2)
      # either kind:
      #   language: en                      # else detected
      #   max_seconds: 30m                  # longer audio is not transcribed (default 30m)

A local model is loaded from ``model_dir`` only (model.bin, config.json, tokenizer.json):
nothing is downloaded at run time. Keys are read on the host when a file is sent: never
in group.yaml, a mount, a frame or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.limits import DEFAULT_TRANSCRIBE_MAX_SECONDS, MAX_TRANSCRIBE_SECONDS
from orchestrator.secrets import SecretRef, parse_secret_ref

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

KINDS = ("openai", "local")
OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "whisper-1"
DEFAULT_MAX_BYTES = 25 * 1024 * 1024  # OpenAI's upload limit
NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
COMPUTE_TYPES = ("int8", "int8_float32", "int16", "float32", "default")
OFF = "off"  # group.yaml media.transcribe: no transcription


@dataclass(frozen=True)
class TranscriberDef:
    name: str
    kind: str
    base_url: str = OPENAI_URL
    key: SecretRef = field(default_factory=SecretRef)
    model: str = DEFAULT_MODEL  # the endpoint's model (openai)
    model_dir: Path | None = None  # the model's folder (local)
    compute_type: str = "int8"
    threads: int = 2
    language: str | None = None
    max_seconds: int = DEFAULT_TRANSCRIBE_MAX_SECONDS
    max_bytes: int = DEFAULT_MAX_BYTES
    price_per_minute: float | None = None

    @property
    def model_name(self) -> str:
        """The model, as usage records it: the endpoint's, or the local folder's name."""
        return self.model_dir.name if self.kind == "local" and self.model_dir else self.model

    def resolve_key(self, secrets_file: Path | None) -> str | None:
        return self.key.resolve(f"transcription.{self.name}", secrets_file)

    def to_dict(self) -> dict[str, object]:
        """For people and JSON: never the key, only where it comes from."""
        return {
            "name": self.name,
            "kind": self.kind,
            "base_url": self.base_url if self.kind == "openai" else None,
            "key": self.key.describe(),
            "model": self.model_name,
            "model_dir": str(self.model_dir) if self.model_dir else None,
            "language": self.language,
            "max_seconds": self.max_seconds,
            "price_per_minute": self.price_per_minute,
        }


def parse_transcription(reader: MappingReader) -> Mapping[str, TranscriberDef]:
    """The ``transcription`` mapping of orchestrator.yaml, validated."""
    from orchestrator.units import parse_duration, parse_size

    out: dict[str, TranscriberDef] = {}
    for name in reader.data or {}:
        if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or name == OFF:
            raise reader.fail(
                str(name),
                "a transcriber's name is 1-40 of a-z, 0-9, '-' and '_' (not 'off', which "
                "group.yaml media.transcribe uses to turn transcription off)",
            )
        item = reader.child(name)
        item.reject_unknown(
            ["kind", "base_url", "key_env", "key_secret", "model", "model_dir",
             "compute_type", "threads", "language", "max_seconds", "max_bytes",
             "price_per_minute"]
        )  # fmt: skip
        kind = item.choice("kind", KINDS, item.raw("kind"))
        seconds = parse_duration(item.raw("max_seconds", DEFAULT_TRANSCRIBE_MAX_SECONDS))
        if seconds is None or not 1 <= seconds <= MAX_TRANSCRIBE_SECONDS:
            raise item.fail(
                "max_seconds",
                f"got {item.data.get('max_seconds')!r}; expected a duration from 1s to "
                f"{MAX_TRANSCRIBE_SECONDS // 3600}h, such as 30m",
            )
        language = (
            item.text("language", pattern=r"[a-z]{2,3}", max_chars=3)
            if "language" in item.data
            else None
        )
        price = item.raw("price_per_minute", None)
        if price is not None and (
            isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < 1e6
        ):
            raise item.fail("price_per_minute", f"got {price!r}; expected a price from 0")
        if kind == "openai":
            for key in ("model_dir", "compute_type", "threads"):
                if key in item.data:
                    raise item.fail(key, "is a setting of kind local; this one is openai")
            size = parse_size(item.raw("max_bytes", DEFAULT_MAX_BYTES))
            if size is None or not 1024 <= size <= 1024**3:
                raise item.fail(
                    "max_bytes",
                    f"got {item.data.get('max_bytes')!r}; expected a size from 1k to 1g",
                )
            out[name] = TranscriberDef(
                name,
                kind,
                base_url=item.text("base_url", OPENAI_URL, pattern=r"https?://\S+", max_chars=512),
                key=parse_secret_ref(item, "key_env", "key_secret", required=False),
                model=item.text("model", DEFAULT_MODEL, max_chars=100),
                language=language,
                max_seconds=seconds,
                max_bytes=size,
                price_per_minute=float(price) if price is not None else None,
            )
            continue
        for key in ("base_url", "key_env", "key_secret", "model", "max_bytes"):
            if key in item.data:
                raise item.fail(key, "is a setting of kind openai; this one is local")
        folder = Path(item.text("model_dir", max_chars=4096)).expanduser()
        if not folder.is_absolute():
            raise item.fail("model_dir", f"{str(folder)!r} is not an absolute path")
        out[name] = TranscriberDef(
            name,
            kind,
            model_dir=folder,
            compute_type=item.choice("compute_type", COMPUTE_TYPES, "int8"),
            threads=item.whole_number("threads", 2, 1, 64, "1 to 64"),
            language=language,
            max_seconds=seconds,
            price_per_minute=float(price) if price is not None else None,
        )
    return out

"""Images for vision models: read on the host through the confined file layer, decoded
with Pillow under a pixel cap, and re-encoded as one format (JPEG) with every piece of
metadata left behind (EXIF, GPS, ICC, comments), the longest side bounded.

A file is refused, with a line saying why, when it is too large to read, is not an
image Pillow knows, or declares more pixels than IMAGE_SOURCE_MAX_PIXELS: the check is
made on the header, before a pixel is decoded, so a decompression bomb (a small PNG that
declares 100,000 x 100,000 pixels) costs nothing. Pillow's own bomb check stays on
beside ours. Only the first frame of an animation is shown.
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

from orchestrator.limits import (
    IMAGE_CACHE_ITEMS,
    IMAGE_JPEG_QUALITY,
    IMAGE_MAX_SIDE,
    IMAGE_SOURCE_MAX_PIXELS,
)

JPEG = "image/jpeg"


class ImageRefused(Exception):
    """Not an image a model is shown; the text says why, for the model and the log."""


@dataclass(frozen=True)
class EncodedImage:
    data: bytes  # JPEG, no metadata
    width: int
    height: int
    source_width: int
    source_height: int
    media_type: str = JPEG


def reencode(
    data: bytes,
    *,
    max_pixels: int = IMAGE_SOURCE_MAX_PIXELS,
    max_side: int = IMAGE_MAX_SIDE,
    quality: int = IMAGE_JPEG_QUALITY,
) -> EncodedImage:
    """``data`` decoded and encoded again as a JPEG of at most ``max_side`` pixels a
    side, without metadata. ImageRefused for what is not an image, or declares more
    than ``max_pixels`` pixels (before anything is decoded)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            source = Image.open(io.BytesIO(data))
            width, height = source.size
            if width <= 0 or height <= 0 or width * height > max_pixels:
                raise ImageRefused(
                    f"it declares {width:,} x {height:,} pixels, more than the "
                    f"{max_pixels:,} an image may have (a decompression bomb is refused too)"
                )
            source.seek(0)  # the first frame of an animation
            scale = max_side / max(width, height)
            if scale < 1:  # a JPEG decodes at a smaller scale, at least the size shown
                source.draft("RGB", (math.ceil(width * scale), math.ceil(height * scale)))
            image = ImageOps.exif_transpose(source)  # upright as shown, then EXIF dropped
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS, reducing_gap=3.0)
            if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
                rgba = image.convert("RGBA")  # an RGB image's colour key is transparency too
                flat = Image.new("RGB", rgba.size, (255, 255, 255))
                flat.paste(rgba, mask=rgba.getchannel("A"))
                image = flat
            elif image.mode != "RGB":
                image = image.convert("RGB")
            out = io.BytesIO()
            # a new image from the pixels alone: nothing of the source's info is carried
            clean = Image.frombytes("RGB", image.size, image.tobytes())
            clean.save(out, "JPEG", quality=quality, optimize=False)
    except ImageRefused:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageRefused(f"a decompression bomb: {exc}") from None
    except UnidentifiedImageError:
        raise ImageRefused("it is not an image this host can read") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageRefused(f"it could not be decoded: {exc}") from None
    return EncodedImage(out.getvalue(), clean.width, clean.height, width, height)


class ImageCache:
    """Re-encoded images by the sha256 of their source bytes (a conversation's image is
    sent with every request of its turns until compaction: it is encoded once)."""

    def __init__(self, items: int = IMAGE_CACHE_ITEMS) -> None:
        self.items = items
        self._lock = threading.Lock()
        self._found: OrderedDict[str, EncodedImage | ImageRefused] = OrderedDict()

    def encoded(self, data: bytes) -> EncodedImage:
        """``reencode(data)``, from the cache when the same bytes were seen; raises the
        ImageRefused it raised then."""
        key = hashlib.sha256(data).hexdigest()
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
        if found is None:
            try:
                found = reencode(data)
            except ImageRefused as exc:
                found = exc
            with self._lock:
                self._found[key] = found
                while len(self._found) > self.items:
                    self._found.popitem(last=False)
        if isinstance(found, ImageRefused):
            raise found
        return found

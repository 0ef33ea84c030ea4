"""Images by reference, for one model request: the runner's messages name files under
``files/`` (``images``); here each is read through the confined file layer, re-encoded
(``media.images``: pixels bounded, metadata stripped, JPEG) and put on its message as
``image_data`` for the provider adapter to shape (Anthropic's ``image`` block, OpenAI's
``image_url`` part). Nothing of an image's bytes is ever in a frame or a transcript:
only its path.

At most IMAGES_PER_REQUEST_MAX images go with one request (the newest); an older one,
one the host refuses (too large, not an image, a decompression bomb, a link), and every
image for a model without ``vision`` (providers.NAME.model_info.MODEL.vision) become a
line naming the image and its size, so the model knows it is there.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.limits import IMAGE_SOURCE_MAX_BYTES, IMAGES_PER_REQUEST_MAX
from orchestrator.media.images import ImageCache, ImageRefused
from orchestrator.relay.providers.base import ModelCall
from orchestrator.units import human_bytes

log = logging.getLogger("orchestrator.relay")
FILES = "files/"


def with_images(
    call: ModelCall,
    groups_root: Path,
    group: str,
    cache: ImageCache,
    *,
    vision: bool,
    model: str,
    limit: int = IMAGES_PER_REQUEST_MAX,
) -> ModelCall:
    """``call`` with each message's ``images`` turned into ``image_data`` (shown) or a
    line (not shown, and why)."""
    if not any(m.get("images") for m in call.messages):
        return call
    from orchestrator.confined import open_group_dir

    # the newest ``limit`` images are shown; counted from the end
    order = [(i, p) for i, m in enumerate(call.messages) for p in m.get("images") or []]
    shown = {id_ for id_ in order[-limit:]} if vision else set()
    messages: list[dict[str, Any]] = []
    with open_group_dir(groups_root, group) as folder:
        for index, message in enumerate(call.messages):
            paths = message.get("images") or []
            if not paths:
                messages.append(message)
                continue
            data: list[dict[str, str]] = []
            lines: list[str] = []
            for path in paths:
                size, found, problem = _read(folder, path)
                label = f"[image {path}{f', {human_bytes(size)}' if size is not None else ''}"
                if problem is not None:
                    lines.append(f"{label}: not shown: {problem}]")
                    continue
                if not vision:
                    lines.append(f"{label}: not shown: {model} does not take images]")
                    continue
                if (index, path) not in shown:
                    lines.append(
                        f"{label}: not shown again (at most {limit} images go with one "
                        "request: the newest)]"
                    )
                    continue
                assert found is not None
                try:
                    encoded = cache.encoded(found)
                except ImageRefused as exc:
                    log.info("group %s: image %s not shown: %s", group, path, exc)
                    lines.append(f"{label}: not shown: {exc}]")
                    continue
                data.append(
                    {
                        "media_type": encoded.media_type,
                        "base64": base64.b64encode(encoded.data).decode("ascii"),
                    }
                )
            out = {k: v for k, v in message.items() if k != "images"}
            if lines:
                content = out.get("content")
                text = content if isinstance(content, str) else ""
                out["content"] = (text + "\n" if text else "") + "\n".join(lines)
            if data:
                out["image_data"] = data
            messages.append(out)
    return replace(call, messages=messages)


def _read(folder: Any, path: str) -> tuple[int | None, bytes | None, str | None]:
    """(its size, its bytes, why it cannot be shown) of the file at ``path``, read
    through the confined layer (a link, FIFO or folder is refused)."""
    from orchestrator.confined import UnsafePath

    if not path.startswith(FILES):
        return None, None, "only files under files/ are shown"
    st = folder.lstat(path)
    size = st.st_size if st is not None else None
    if size is not None and size > IMAGE_SOURCE_MAX_BYTES:
        return size, None, f"it is over the {human_bytes(IMAGE_SOURCE_MAX_BYTES)} an image may be"
    try:
        return size, folder.read_bytes(path, IMAGE_SOURCE_MAX_BYTES), None
    except FileNotFoundError:
        return None, None, "no such file"
    except UnsafePath as exc:
        return size, None, exc.reason
    except OSError as exc:
        return size, None, f"it could not be read ({exc.strerror or exc})"

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

    # the newest ``limit`` images that can be shown are: decided from the last one back
    outcome: dict[tuple[int, int], dict[str, str] | str] = {}
    count = 0
    with open_group_dir(groups_root, group) as folder:
        for index in range(len(call.messages) - 1, -1, -1):
            paths = call.messages[index].get("images") or []
            for number in range(len(paths) - 1, -1, -1):
                path = paths[number]
                size, found, problem = _read(folder, path)
                label = f"[image {path}{f', {human_bytes(size)}' if size is not None else ''}"
                if problem is not None:
                    outcome[index, number] = f"{label}: not shown: {problem}]"
                elif not vision:
                    outcome[index, number] = f"{label}: not shown: {model} does not take images]"
                elif count >= limit:
                    outcome[index, number] = (
                        f"{label}: not shown again (at most {limit} images go with one "
                        "request: the newest)]"
                    )
                else:
                    assert found is not None
                    try:
                        encoded = cache.encoded(found)
                    except ImageRefused as exc:
                        log.info("group %s: image %s not shown: %s", group, path, exc)
                        outcome[index, number] = f"{label}: not shown: {exc}]"
                        continue
                    count += 1
                    outcome[index, number] = {
                        "media_type": encoded.media_type,
                        "base64": base64.b64encode(encoded.data).decode("ascii"),
                    }
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(call.messages):
        paths = message.get("images") or []
        if not paths:
            messages.append(message)
            continue
        results = [outcome[index, number] for number in range(len(paths))]
        lines = [r for r in results if isinstance(r, str)]
        data = [r for r in results if isinstance(r, dict)]
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

"""The real model of the bench: PP-OCRv4's text detector as shipped inside the
``rapidocr-onnxruntime`` package ("read the text in a game frame", for accessibility and
translation overlays). A fully convolutional network: a 1x3xHxW image in (H and W multiples of
32), a 1x1xHxW text probability map out.

The bench feeds it a synthetic game frame with a HUD, a quest line and subtitles drawn on it,
normalized as PP-OCR's detector expects, so the network does its real work."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

NAME = "ppocr_det"
PACKAGE = "rapidocr_onnxruntime"
FILE = "ch_PP-OCRv4_det_infer.onnx"
IMAGE = (736, 1280)  # a 1280x720 frame, H padded up to a multiple of 32


def find_model() -> Path | None:
    """The detector's ONNX file inside the installed package, found without importing it (its
    import pulls in OpenCV); None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        exact = Path(root) / "models" / FILE
        if exact.is_file():
            return exact
        found = sorted(Path(root).rglob("*PP-OCRv4_det*.onnx"))
        if found:
            return found[0]
    return None


@functools.lru_cache(maxsize=4)
def text_frame(height: int, width: int) -> npt.NDArray[Any]:
    """3xHxW float32: a frame with text, scaled as PP-OCR's detector wants ((x/255 - 0.5)/0.5,
    BGR channel order)."""
    from PIL import Image, ImageDraw, ImageFont

    sky = np.linspace(40, 140, height, dtype=np.float32)[:, None, None]
    rgb = np.broadcast_to(sky * np.array([0.5, 0.7, 1.0], np.float32), (height, width, 3)).copy()
    rgb[int(height * 0.7):] = (60, 90, 40)  # ground
    image = Image.fromarray(rgb.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    scale = max(height, 64) / 720

    def font(px: float) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
        try:
            return ImageFont.load_default(size=max(8, int(px * scale)))
        except TypeError:  # Pillow without FreeType: the fixed bitmap font
            return ImageFont.load_default()

    draw.rectangle((int(20 * scale), int(20 * scale), int(360 * scale), int(110 * scale)),
                   fill=(20, 20, 30))
    draw.text((int(32 * scale), int(30 * scale)), "HP 87/100   MANA 42", font=font(28),
              fill=(240, 240, 240))
    draw.text((int(32 * scale), int(66 * scale)), "LEVEL 12  GOLD 1,250", font=font(28),
              fill=(250, 210, 60))
    draw.text((int(width - 560 * scale), int(40 * scale)), "QUEST: Find the old lighthouse",
              font=font(30), fill=(255, 255, 255))
    draw.rectangle((0, int(height - 130 * scale), width, height), fill=(0, 0, 0))
    draw.text((int(120 * scale), int(height - 110 * scale)),
              "Captain: The storm is coming. Get to the boats before nightfall!",
              font=font(36), fill=(255, 255, 255))
    draw.text((int(120 * scale), int(height - 60 * scale)), "[E] Talk    [Q] Map    [Esc] Menu",
              font=font(30), fill=(200, 200, 200))
    bgr = np.asarray(image, dtype=np.float32)[:, :, ::-1]
    chw = np.ascontiguousarray(bgr.transpose(2, 0, 1))
    return (chw / 255.0 - 0.5) / 0.5


def text_fraction(probability_map: npt.NDArray[Any], threshold: float = 0.3) -> float:
    """The share of pixels the detector calls text: a sanity figure for the report."""
    return float((probability_map > threshold).mean())

"""The demo's before/after picture labels both halves and says, under them, what the model did
(a newcomer otherwise reads the tone-mapped half as washed out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image

from fenceline.demo.renderer import CAPTION, SHAPE, Scene, W, write_before_after
from fenceline.models.builtin import image_filter_model


def test_the_picture_has_both_halves_and_a_caption_of_what_the_model_did(tmp_path: Path) -> None:
    before = np.zeros(SHAPE, np.float32)
    Scene().draw(1.0, before)
    session = ort.InferenceSession(image_filter_model(), providers=["CPUExecutionProvider"])
    (after,) = session.run(None, {"image": before})
    out = tmp_path / "demo.png"
    write_before_after(before[0], after[0], str(out))
    image = np.asarray(Image.open(out).convert("RGB"))
    height = SHAPE[2] // 2
    assert image.shape[1] == W + 8 and image.shape[0] > height + 14 * len(CAPTION)
    caption = image[height:]
    assert (caption > 200).any(), "no caption text under the frames"
    text = " ".join(CAPTION)
    # The caption's formula is the model's: exposure 2, Reinhard x / (1 + x).
    assert "y = 2x / (1 + 2x)" in text and "sharpen" in text
    flat = np.full(SHAPE, 0.3, np.float32)  # a flat frame: the sharpen leaves it as it is
    (toned,) = session.run(None, {"image": flat})
    assert np.isclose(toned[0, 0, 360, 640], 2 * 0.3 / (1 + 2 * 0.3))

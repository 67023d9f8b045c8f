"""A stand-in for a game engine: animates 1280x720 frames into shared memory, hands each one to
fenceline through fences over the IPC socket, checks the output fence, and keeps a live
progress line. ``python -m fenceline.demo.renderer --socket PATH``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from PIL import Image, ImageDraw

from fenceline.client import Fence, IpcClient, SharedFrame, View
from fenceline.stats import percentile

H, W = 720, 1280
SHAPE = [1, 3, H, W]
NBYTES = 3 * H * W * 4


class Scene:
    """A moving light over animated colour bands: enough structure for sharpening and tone
    mapping to show."""

    def __init__(self) -> None:
        self.y, self.x = np.mgrid[0:H, 0:W].astype(np.float32)
        self.x /= W
        self.y /= H

    def draw(self, t: float, out: np.ndarray) -> None:
        x, y = self.x, self.y
        cx, cy = 0.5 + 0.35 * np.cos(t * 0.9), 0.5 + 0.3 * np.sin(t * 1.3)
        light = 2.5 * np.exp(-((x - cx) ** 2 * 3.2 + (y - cy) ** 2 * 1.8) * 18)
        bands = (np.sin((x * 9 + y * 3) * np.pi + t * 2) > 0.6).astype(np.float32) * 0.25
        out[0, 0] = 0.25 + 0.2 * np.sin(x * 6 + t) + light + bands
        out[0, 1] = 0.2 + 0.25 * y + light * 0.8
        out[0, 2] = 0.35 + 0.2 * np.cos(y * 5 - t) + light * 0.5 + bands


def to_image(chw: np.ndarray) -> Image.Image:
    rgb = np.clip(chw.transpose(1, 2, 0), 0, 1)
    return Image.fromarray((rgb * 255 + 0.5).astype(np.uint8))


# What the picture says under the two halves: what the model did, so that the flatter, lighter
# "after" reads as the tone mapping it is, not as a fault.
CAPTION = (
    "The model (image_filter), run in place on the renderer's shared frame: a 3x3 sharpen, then "
    "exposure x2 and Reinhard tone mapping, y = 2x / (1 + 2x).",
    "Tone mapping squeezes every brightness into 0..1: the light that clips to white on the left "
    "keeps its shape on the right, and darks lift,",
    "so the right half looks flatter and lighter: that is what the filter does. Edges look crisper "
    "from the sharpen.",
)
LABELS = ("before: the renderer's frame (values above 1 clip to white)",
          "after: the service's output in the same memory")


def write_before_after(before: np.ndarray, after: np.ndarray, path: str) -> None:
    """The two frames side by side, each labelled, with a caption saying what the model did."""
    half = (W // 2, H // 2)
    a = to_image(before).resize(half, Image.Resampling.BILINEAR)
    b = to_image(after).resize(half, Image.Resampling.BILINEAR)
    line_h = 14
    caption_h = 12 + line_h * len(CAPTION)
    canvas = Image.new("RGB", (half[0] * 2 + 8, half[1] + caption_h), (20, 20, 20))
    canvas.paste(a, (0, 0))
    canvas.paste(b, (half[0] + 8, 0))
    draw = ImageDraw.Draw(canvas)
    for x, label in zip((10, half[0] + 18), LABELS, strict=True):
        draw.rectangle((x - 4, 8, x + draw.textlength(label) + 4, 26), fill=(0, 0, 0))
        draw.text((x, 11), label, fill=(255, 255, 255))
    for i, line in enumerate(CAPTION):
        draw.text((10, half[1] + 6 + i * line_h), line, fill=(230, 230, 230))
    canvas.save(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--frames", type=int, default=240)
    p.add_argument("--png", default="fenceline-demo.png")
    args = p.parse_args(argv)

    scene = Scene()
    frame = SharedFrame(2 * NBYTES)
    ready, done = Fence(), Fence()
    client = IpcClient(args.socket, name="fenceline-demo-renderer")
    memory = client.import_memory(frame)
    session = client.create_session(
        "image_filter",
        {"image": View(memory, "FP32", SHAPE)},
        {"display": View(memory, "FP32", SHAPE, NBYTES)},
        client.import_fence(ready),
        client.import_fence(done),
    )["id"]
    image, display = frame.array(np.float32, SHAPE), frame.array(np.float32, SHAPE, NBYTES)

    latencies: list[float] = []
    tty = sys.stdout.isatty()
    start = last_print = time.perf_counter()
    for n in range(1, args.frames + 1):
        scene.draw(n / 30, image)
        t0 = time.perf_counter()
        ready.signal(n)  # "inputs ready at fence value n"
        reply = client.run(session, n)
        latencies.append(time.perf_counter() - t0)
        if reply.signal_value != n or done.value != n:
            print(f"\noutput fence at {done.value}, expected {n}", file=sys.stderr)
            return 1
        now = time.perf_counter()
        if n == args.frames or now - last_print > (0.1 if tty else 1.0):
            last_print = now
            line = (
                f"frame {n:4d}/{args.frames}  {n / (now - start):6.1f} fps  "
                f"run p50 {percentile(latencies, 0.5) * 1e3:6.2f} ms  "
                f"p99 {percentile(latencies, 0.99) * 1e3:6.2f} ms  "
                f"(model {reply.infer_us / 1e3:.2f} ms)"
            )
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
    if tty:
        print()
    write_before_after(image[0], display[0], args.png)
    print(f"before/after written to {args.png}")
    client.close()
    frame.close()
    ready.close()
    done.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

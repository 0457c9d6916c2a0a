#!/usr/bin/env python3
"""make_vl_preproc_fixtures.py: what transformers' Qwen2-VL / Qwen3-VL slow
(PIL) image processor makes of a few images, for tests/test_vl.c.

Writes DIR/ (tests/data/hf/qwen3vl_preproc/):
  oracle.json       the processor settings and, per image, its size, the
                    grid (t, h, w) and the files below
  imageK.rgb        the input: H x W x 3 uint8, row-major (made here from a
                    formula, so any size and aspect ratio can be had)
  imageK.resized    PIL's bicubic resize of it to the processor's target
                    size (uint8, H' x W' x 3): what is compared before
                    normalisation
  imageK.pixels.f32 the processor's pixel_values [N, C*tp*p*p]

Usage:
  /tmp/hfvenv/bin/python scripts/make_vl_preproc_fixtures.py tests/data/hf/qwen3vl_preproc
(the venv of make_vl_fixtures.py; pillow comes with transformers' image extras)
"""
import json
import os
import sys

import numpy as np
import PIL
from PIL import Image
import transformers
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil, smart_resize)

# Qwen3-VL's processor settings, with small patches and pixel caps so that
# the arrays stay small: patch 8, merge 2 (factor 16), 2 frames per patch.
SETTINGS = {
    "patch_size": 8,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 64},
}

# (width, height): an upscale to the pixel floor, a mild resize, a strong
# downscale (antialiased), a wide one past the pixel cap, one wider and
# shorter (Pillow then runs its vertical pass first).
SIZES = [(20, 13), (45, 30), (200, 150), (400, 37), (60, 40)]


def image(w, h, seed):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127.5 + 127.5 * np.sin(x * 0.37 + seed) * np.cos(y * 0.21)
    g = (x * 7 + y * 3 + seed * 11) % 256
    b = 255.0 * ((x // 3 + y // 5 + seed) % 2)
    rng = np.random.default_rng(seed)
    noise = rng.integers(-20, 21, size=(h, w))
    rgb = np.stack([r + noise, g, b - noise], axis=-1)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    proc = Qwen2VLImageProcessorPil(**SETTINGS)
    factor = SETTINGS["patch_size"] * SETTINGS["merge_size"]
    images = []
    for k, (w, h) in enumerate(SIZES):
        rgb = image(w, h, k + 1)
        rh, rw = smart_resize(h, w, factor, SETTINGS["size"]["shortest_edge"],
                              SETTINGS["size"]["longest_edge"])
        resized = np.asarray(Image.fromarray(rgb).resize((rw, rh), Image.BICUBIC))
        feat = proc(images=[Image.fromarray(rgb)], return_tensors="np")
        pix = feat["pixel_values"].astype(np.float32)
        grid = [int(v) for v in feat["image_grid_thw"][0]]
        assert grid[1] * SETTINGS["patch_size"] == rh and grid[2] * SETTINGS["patch_size"] == rw
        rgb.tofile(os.path.join(out, f"image{k}.rgb"))
        resized.tofile(os.path.join(out, f"image{k}.resized"))
        pix.tofile(os.path.join(out, f"image{k}.pixels.f32"))
        images.append({"width": w, "height": h, "resized": [rh, rw], "grid_thw": grid,
                       "pixels_shape": list(pix.shape)})
    json.dump({"transformers": transformers.__version__, "pillow": PIL.__version__,
               "processor": "Qwen2VLImageProcessorPil", "settings": SETTINGS,
               "images": images}, open(os.path.join(out, "oracle.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

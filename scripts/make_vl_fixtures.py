#!/usr/bin/env python3
"""make_vl_fixtures.py: a tiny random Qwen3-VL checkpoint and what
transformers (not Kiln) computes for it, for tests/test_vl.c.

Writes tests/data/hf/<name>/: what save_pretrained wrote (config.json,
model.safetensors, generation_config.json) plus oracle.json and the raw
arrays it names (little-endian, row-major, shapes in oracle.json):

  images[i]: pixel_values   [N_i, C*tp*p*p] f32  the processor's layout (one image)
             grid_thw       [3]                  (t, h, w) in patches
             interp_idx     [N_i, 4] i32         bilinear taps into pos_embed
             interp_w       [N_i, 4] f32         their weights
             rope_pos       [N_i, 2] i32         (row, col) of each patch
             features       [N_i/4, D] f32       model.visual(...).pooler_output
             deepstack[k]   [N_i/4, D] f32       each DeepStack feature
  cases[j]:  ids            [T] i32              the prompt, image pads expanded
             images         the images it holds, in order
             position_ids   [3, T] i32           get_rope_index
             rope_delta     int
             logits         [T, V] f32           every position of the prefill
             decode         10 greedy steps: token, position, logits [V] each

The arrays come from reloading the saved folder in float32. The folder
also gets the image processor's preprocessor_config.json (patch 8, merge 2,
1024..4096 pixels) and images as files, for the loader and `kiln generate
--image`: photo.png (RGB), photo.jpg (quality 90) with photo.jpg.rgb (what
PIL decodes it to), alpha.png (RGBA), gray.png (L), palette.png (P), each
with NAME.rgb, what transformers' convert_to_rgb makes of it (H x W x 3
uint8). images[2] is photo.png through the processor, and case 2 prompts
with it.

Usage (CPU is enough):
  python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
  /tmp/hfvenv/bin/python scripts/make_vl_fixtures.py tests/data/hf
  /tmp/hfvenv/bin/python scripts/make_vl_fixtures.py tests/data/hf --wide \
      build-test/tests/make_random_vl [qwen3vl_2b_wide] [qwen3vl_2b_full]

--wide writes tests/data/hf/qwen3vl_2b_wide/: the same oracle (images 0-1,
cases 0-1) for Qwen3-VL-2B-Instruct's widths with two layers each side
(qwen3vl_2b_full: every layer, a 4.3 GB folder), the
weights from tests/make_random_vl.c (a function of the seed alone, so only
the oracle is committed; the test regenerates the 1 GB folder), logits
every 97th column (logit_stride).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.image_transforms import convert_to_rgb
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.vision_utils import (get_vision_interpolation_indices_and_weights,
                                       get_vision_position_ids)
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_vl_preproc_fixtures import image as formula_image  # noqa: E402

IMAGE, VSTART, VEND = 250, 251, 252  # ids inside the tiny vocabulary
DECODE_STEPS = 10


def tiny_config():
    text = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters=dict(rope_type="default", rope_theta=5000.0,
                                     mrope_section=[2, 3, 3], mrope_interleaved=True))
    vision = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, in_channels=3,
                  patch_size=8, temporal_patch_size=2, spatial_merge_size=2,
                  out_hidden_size=64, num_position_embeddings=36, hidden_act="gelu_pytorch_tanh",
                  deepstack_visual_indexes=[0, 2])
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE,
                         vision_start_token_id=VSTART, vision_end_token_id=VEND,
                         video_token_id=253, tie_word_embeddings=False)


def randomize(model, seed):
    """Every parameter random: norms 1 + N(0, 0.2), biases N(0, 0.2), so a
    norm or bias wired wrong shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith(".weight"):
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or "pos_embed" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            else:
                v = 0.08 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(p.dtype))


PROCESSOR = dict(patch_size=8, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                 image_std=[0.5] * 3, size={"shortest_edge": 32 * 32, "longest_edge": 64 * 64})


def image_files(out):
    """The images as files, and what PIL / transformers decode them to."""
    rgb = formula_image(60, 40, 7)
    photo = Image.fromarray(rgb)
    photo.save(os.path.join(out, "photo.png"))
    photo.save(os.path.join(out, "photo.jpg"), quality=90)
    with Image.open(os.path.join(out, "photo.jpg")) as j:
        np.asarray(convert_to_rgb(j)).tofile(os.path.join(out, "photo.jpg.rgb"))
    a = np.concatenate([rgb[:24, :32], (np.arange(24 * 32) % 256).reshape(24, 32, 1)
                        .astype(np.uint8)], axis=-1)
    Image.fromarray(a, "RGBA").save(os.path.join(out, "alpha.png"))
    Image.fromarray(rgb[:17, :23, 1]).save(os.path.join(out, "gray.png"))
    photo.crop((0, 0, 21, 19)).quantize(16).save(os.path.join(out, "palette.png"))
    for name in ("photo.png", "alpha.png", "gray.png", "palette.png"):
        with Image.open(os.path.join(out, name)) as im:
            np.asarray(convert_to_rgb(im)).tofile(os.path.join(out, name[:-4] + ".rgb"))
    return photo


def save(out, name, arr, dtype):
    a = np.ascontiguousarray(arr, dtype=dtype)
    a.tofile(os.path.join(out, name))
    return {"file": name, "shape": list(a.shape)}


def image_oracle(ref, out, i, pv, grid, oracle):
    """images[i]: what the tower makes of pixel_values pv (grid (t, h, w))."""
    vc = ref.config.vision_config
    t, h, w = grid
    thw = torch.tensor([[t, h, w]])
    side = int(vc.num_position_embeddings ** 0.5)
    idx, wt = get_vision_interpolation_indices_and_weights(
        thw, num_grid_per_side=side, mode="bilinear", align_corners=True,
        spatial_merge_size=vc.spatial_merge_size)
    pos = get_vision_position_ids(thw, vc.spatial_merge_size)
    vis = ref.model.visual(pv, grid_thw=thw)
    oracle["images"].append({
        "grid_thw": [t, h, w],
        "pixel_values": save(out, f"image{i}.pixels.f32", pv.numpy(), "<f4"),
        "interp_idx": save(out, f"image{i}.interp_idx.i32", idx.numpy(), "<i4"),
        "interp_w": save(out, f"image{i}.interp_w.f32", wt.numpy(), "<f4"),
        "rope_pos": save(out, f"image{i}.rope_pos.i32", pos.numpy(), "<i4"),
        "features": save(out, f"image{i}.features.f32", vis.pooler_output.numpy(), "<f4"),
        "deepstack": [save(out, f"image{i}.deepstack{k}.f32", d.numpy(), "<f4")
                      for k, d in enumerate(vis.deepstack_features)]})
    return (pv, thw, t * h * w // vc.spatial_merge_size ** 2)


def case_oracle(ref, out, j, images, pixels, oracle, stride):
    """cases[j]: a prompt holding `images` (indexes into pixels), its prefill
    and DECODE_STEPS greedy steps. Logits keep every stride-th column."""
    cfg = ref.config
    image, vstart, vend = cfg.image_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id
    ids = [1, 17, 200]
    for k, im in enumerate(images):
        ids += [vstart] + [image] * pixels[im][2] + [vend] + [40 + k, 41 + k]
    ids = torch.tensor([ids + [5, 99]])
    pv = torch.cat([pixels[i][0] for i in images])
    thw = torch.cat([pixels[i][1] for i in images])
    mm = (ids == image).int()
    pos_ids, delta = ref.model.get_rope_index(ids, mm_token_type_ids=mm, image_grid_thw=thw)
    res = ref(input_ids=ids, pixel_values=pv, image_grid_thw=thw, mm_token_type_ids=mm,
              use_cache=True)
    case = {"images": images,
            "ids": save(out, f"case{j}.ids.i32", ids[0].numpy(), "<i4"),
            "position_ids": save(out, f"case{j}.position_ids.i32", pos_ids[:, 0].numpy(), "<i4"),
            "rope_delta": int(delta[0, 0]),
            "logits": save(out, f"case{j}.logits.f32", res.logits[0, :, ::stride].numpy(), "<f4"),
            "decode": []}
    cache = res.past_key_values
    tok = int(res.logits[0, -1].argmax())
    T = ids.shape[1]
    steps = []
    for s in range(DECODE_STEPS):
        p = T + s + int(delta[0, 0])
        step = ref(input_ids=torch.tensor([[tok]]), past_key_values=cache,
                   position_ids=torch.tensor([[[T + s]], [[p]], [[p]], [[p]]]), use_cache=True)
        cache = step.past_key_values
        steps.append(step.logits[0, -1, ::stride].numpy())
        case["decode"].append({"token": tok, "position": p})
        tok = int(step.logits[0, -1].argmax())
    case["decode_logits"] = save(out, f"case{j}.decode.f32", np.stack(steps), "<f4")
    oracle["cases"].append(case)


def make(root, name, seed):
    out = os.path.join(root, name)
    shutil.rmtree(out, ignore_errors=True)
    torch.manual_seed(seed)
    cfg = tiny_config()
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(out, safe_serialization=True)
    proc = Qwen2VLImageProcessorPil(**PROCESSOR)
    proc.save_pretrained(out)
    photo = image_files(out)
    ref = Qwen3VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    vc = cfg.vision_config
    pdim = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    g = torch.Generator().manual_seed(seed + 1)
    grids = [(1, 8, 6), (1, 4, 10)]  # (t, h, w) patches: 64x48 and 32x80 pixels
    oracle = {"transformers": transformers.__version__, "torch": torch.__version__,
              "image_token_id": IMAGE, "vision_start_token_id": VSTART,
              "vision_end_token_id": VEND, "images": [], "cases": []}
    with torch.no_grad():
        pixels = [image_oracle(ref, out, i, torch.randn((t * h * w, pdim), generator=g),
                               (t, h, w), oracle) for i, (t, h, w) in enumerate(grids)]
        # images[2]: photo.png through the processor
        feat = proc(images=[photo], return_tensors="pt")
        pv, thw = feat["pixel_values"].float(), feat["image_grid_thw"]
        pixels.append(image_oracle(ref, out, 2, pv, tuple(int(v) for v in thw[0]), oracle))
        oracle["images"][2]["source"] = "photo.png"
        for j, images in enumerate([[0], [0, 1], [2]]):
            case_oracle(ref, out, j, images, pixels, oracle, 1)
    with open(os.path.join(out, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {sorted(os.listdir(out))}, {size} bytes")


# tests/data/hf/<name>: make_random_vl's arguments
WIDE = {"qwen3vl_2b_wide": ["--text-layers", "2", "--vision-layers", "2", "--seed", "1"],
        "qwen3vl_2b_full": ["--seed", "1"]}
WIDE_STRIDE = 97  # logits keep columns 0, 97, 194, ..: 1567 of 151936


def make_wide(root, generator, name):
    """tests/data/hf/NAME: the oracle (no weights) for the folder
    `make_random_vl DIR WIDE[NAME]` writes: Qwen3-VL-2B-Instruct's widths
    (two layers each side, or all of them), bf16 weights read in float32."""
    args = WIDE[name]
    out = os.path.join(root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    work = tempfile.mkdtemp(prefix="kiln-vl-wide-")
    try:
        subprocess.run([generator, work] + args, check=True)
        ref = Qwen3VLForConditionalGeneration.from_pretrained(work, dtype=torch.float32).eval()
    finally:
        shutil.rmtree(work)
    cfg = ref.config
    vc = cfg.vision_config
    pdim = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    g = torch.Generator().manual_seed(7)
    grids = [(1, 8, 6), (1, 4, 10)]  # 128x96 and 64x160 pixels
    oracle = {"transformers": transformers.__version__, "torch": torch.__version__,
              "model": "make_random_vl DIR " + " ".join(args), "logit_stride": WIDE_STRIDE,
              "image_token_id": cfg.image_token_id,
              "vision_start_token_id": cfg.vision_start_token_id,
              "vision_end_token_id": cfg.vision_end_token_id, "images": [], "cases": []}
    with torch.no_grad():
        pixels = [image_oracle(ref, out, i, torch.randn((t * h * w, pdim), generator=g),
                               (t, h, w), oracle) for i, (t, h, w) in enumerate(grids)]
        for j, images in enumerate([[0], [0, 1]]):
            case_oracle(ref, out, j, images, pixels, oracle, WIDE_STRIDE)
    with open(os.path.join(out, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {len(os.listdir(out))} files, {size} bytes")


def main():
    args = sys.argv[1:]
    if len(args) >= 3 and args[1] == "--wide":
        for name in args[3:] or ["qwen3vl_2b_wide"]:
            make_wide(args[0], args[2], name)
        return
    root = args[0] if args else "tests/data/hf"
    make(root, "qwen3vl_tiny_f32", 1234)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# test_generate_image.sh KILN: `kiln generate --image` end to end on the tiny
# random Qwen3-VL fixture (tests/data/hf/qwen3vl_tiny_f32, made by
# scripts/make_vl_fixtures.py). photo.png loaded, resized and normalised by
# the folder's preprocessor_config.json, encoded, expanded into the prompt
# and prefilled in chunks of 8 that split its tokens: the 10 greedy ids
# equal transformers' on the same image and prompt (oracle case 2), from
# the PNG and from the same pixels as a .npy. Wrong placeholder counts, a
# truncated image, a text-only program and an oversized .npy are clear
# errors (exit 1).
set -u
KILN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
D=$HERE/data/hf/qwen3vl_tiny_f32
P=$WORK/vl.kiln
expect compile 0 "wrote" -- "$KILN" compile "$D" -o "$P" --prefill 8 --max-seq 64
# case 2's prompt with its image pads collapsed to one placeholder
IDS="1 17 200 251 250 252 40 41 5 99"
WANT=$(python3 -c "
import json
c = json.load(open('$D/oracle.json'))['cases'][2]
print(' '.join(str(d['token']) for d in c['decode']))")
gen() { "$KILN" generate -m "$P" --prompt-ids "$IDS" --temp 0 -n 10 --print-ids --ignore-eos "$@"; }
out=$(gen --image "$D/photo.png" 2>"$WORK/err")
# a kiln built without libpng or libjpeg (a cross build without the target's
# libraries) says so; those checks skip, the .npy ones still run
png=1 jpeg=1
grep -q "built without libpng" "$WORK/err" && png=0
"$KILN" generate -m "$P" --prompt-ids "$IDS" -n 1 --print-ids --image "$D/photo.jpg" 2>&1 |
  grep -q "built without libjpeg" && jpeg=0
if [ $png = 0 ]; then skipped png_matches_transformers "this kiln reads no PNG"
elif [ "$out" = "$WANT" ] && grep -q "60 x 40 pixels, resized to 64 x 32, 8 tokens" "$WORK/err"; then
  ok "png_matches_transformers ($out)"
else bad png_matches_transformers "got '$out', transformers '$WANT': $(head -2 "$WORK/err")"; fi
# the same pixels as a uint8 .npy, (40, 60, 3)
python3 - "$D/photo.rgb" "$WORK/photo.npy" <<'PY'
import sys
px = open(sys.argv[1], 'rb').read()
h = "{'descr': '|u1', 'fortran_order': False, 'shape': (40, 60, 3), }"
h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
open(sys.argv[2], 'wb').write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h.encode() + px)
PY
out=$(gen --image "$WORK/photo.npy" 2>/dev/null)
if [ "$out" = "$WANT" ]; then ok "npy_matches_transformers"
else bad npy_matches_transformers "got '$out', transformers '$WANT'"; fi
out=$(gen --image "$D/photo.jpg" 2>/dev/null)
if [ $jpeg = 0 ]; then skipped jpeg_generates "this kiln reads no JPEG"
elif [ "$(wc -w <<<"$out")" = 10 ]; then ok "jpeg_generates"; else bad jpeg_generates "'$out'"; fi
expect two_images_one_pad 1 "the prompt holds 1 image placeholder (image pad, id 250) for 2 images" -- \
  gen --image "$D/photo.png" --image "$D/photo.png"
expect no_pad 1 "the prompt holds 0 image placeholders (image pad, id 250) for 1 image" -- \
  "$KILN" generate -m "$P" --prompt-ids "1 2 3" --print-ids --image "$D/photo.png"
head -c 300 "$D/photo.png" >"$WORK/cut.png"
if [ $png = 0 ]; then skipped truncated_png "this kiln reads no PNG"
else expect truncated_png 1 "cut.png': a damaged PNG" -- gen --image "$WORK/cut.png"; fi
expect missing_image 1 "nothing.png': cannot open it" -- gen --image "$WORK/nothing.png"
python3 -c "
h = \"{'descr': '|u1', 'fortran_order': False, 'shape': (100000, 100000, 3), }\"
h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
open('$WORK/huge.npy', 'wb').write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h.encode())"
expect huge_image 1 "100000 x 100000 pixels; Kiln reads images of 1..65536 pixels a side" -- gen --image "$WORK/huge.npy"
python3 -c "
h = \"{'descr': '|u1', 'fortran_order': False, 'shape': (1, 300, 3), }\"
h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
open('$WORK/wide.npy', 'wb').write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h.encode() + bytes(900))"
expect wide_image 1 "aspect ratio 300.0 is over 200" -- gen --image "$WORK/wide.npy"
"$KILN" compile "$HERE/data/hf/qwen3_f32_sharded" -o "$WORK/text.kiln" >/dev/null 2>&1 &&
  expect text_only_program 1 "--image: the program has no vision encoder" -- \
    "$KILN" generate -m "$WORK/text.kiln" --prompt-ids "1 2 3" --print-ids --image "$D/photo.png"
# --max-image-patches: 16 patches of 8 x 8 pixels hold 1024 pixels, so the
# 60 x 40 photo (the processor's 64 x 32, 32 patches) is resized within
# them as smart_resize shrinks (floor to multiples of 16 after scaling by
# sqrt(2400 / 1024))
expect max_image_patches 0 "wrote" -- "$KILN" compile "$D" -o "$WORK/small.kiln" --prefill 8 \
  --max-seq 64 --max-image-patches 16
"$KILN" generate -m "$WORK/small.kiln" --prompt-ids "$IDS" --temp 0 -n 2 --print-ids \
  --image "$WORK/photo.npy" >/dev/null 2>"$WORK/small.err"
if grep -q "60 x 40 pixels, resized to 32 x 16, 2 tokens" "$WORK/small.err"; then ok image_resized_within_the_cap
else bad image_resized_within_the_cap "$(cat "$WORK/small.err")"; fi
expect max_image_patches_multiple 1 "max-image-patches 18 must be a multiple of 4 (the 2 x 2 merge) in 4..1048576" -- \
  "$KILN" compile "$D" -o "$WORK/bad.kiln" --max-image-patches 18
expect max_image_patches_text_only 1 "max-image-patches 16: 'qwen3_f32_sharded' has no vision tower" -- \
  "$KILN" compile "$HERE/data/hf/qwen3_f32_sharded" -o "$WORK/bad.kiln" --max-image-patches 16
finish

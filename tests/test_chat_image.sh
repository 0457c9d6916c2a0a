#!/usr/bin/env bash
# test_chat_image.sh KILN: `kiln chat` with images on the tiny random
# Qwen3-VL fixture (tests/data/hf/qwen3vl_tiny_f32), given here a small
# byte-level tokenizer (ids 0-249 text, 250-255 the image, vision and ChatML
# tokens) and Qwen3-VL Instruct's template in chat_template.json, as its
# repositories keep it (tests/data/chat). A chat turn with "/image" answers as
# `kiln generate --chat --image` does; a second turn with another image,
# which reuses the cached rows and the first image's tokens, answers as a
# fresh chat on the same conversation from --messages (image parts) does;
# the images are encoded once. Wrong inputs (a missing image, /image with
# nothing after it, a typed placeholder without an image, URLs, unknown
# parts, images for a text-only program) are clear errors.
set -u
KILN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
D=$HERE/data/hf/qwen3vl_tiny_f32
mkdir "$WORK/vl"
cp "$D/config.json" "$D/generation_config.json" "$D/preprocessor_config.json" \
  "$D/model.safetensors" "$WORK/vl/"
python3 - "$WORK/vl" "$HERE/data/chat/qwen3vl-instruct.jinja" <<'PY'
import json, sys
# GPT-2's byte-to-character table (what a ByteLevel pre-tokenizer maps to)
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b), cs.append(256 + n)
        n += 1
b2u = dict(zip(bs, map(chr, cs)))
# 0-94 the printable bytes, 95 newline, 96-249 longer pieces (printable when
# decoded); 250-255 the special tokens
vocab = {b2u[b]: b - 32 for b in range(32, 127)}
vocab[b2u[10]] = 95
for i in range(96, 250):
    vocab["<%d>" % i] = i
special = ["<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_start|>", "<|im_end|>",
           "<|endoftext|>"]
added = [dict(id=250 + i, content=t, single_word=False, lstrip=False, rstrip=False,
              normalized=False, special=True) for i, t in enumerate(special)]
vocab.update({t: 250 + i for i, t in enumerate(special)})
bl = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
json.dump({"version": "1.0", "added_tokens": added, "normalizer": None,
           "pre_tokenizer": dict(type="ByteLevel", **bl), "post_processor": None,
           "decoder": dict(type="ByteLevel", **bl),
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                     "byte_fallback": False, "vocab": vocab, "merges": []}},
          open(sys.argv[1] + "/tokenizer.json", "w"))
json.dump({"eos_token": "<|im_end|>", "bos_token": None},
          open(sys.argv[1] + "/tokenizer_config.json", "w"))
# Qwen3-VL-Instruct's own template, where its repositories keep it
json.dump({"chat_template": open(sys.argv[2]).read()}, open(sys.argv[1] + "/chat_template.json", "w"))
PY
P=$WORK/vl.kiln
expect compile 0 "wrote" -- "$KILN" compile "$WORK/vl" -o "$P" --prefill 8 --max-seq 256
chat() { "$KILN" chat -m "$P" --temp 0 -n 8 "$@"; }
# the fixture's images as uint8 .npy (PIL's RGB of photo.png and alpha.png),
# which every build reads (a cross build may lack libpng)
npy() {
  python3 - "$@" <<'PY'
import sys
src, h, w, dst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d, 3), }" % (h, w)
hdr += ' ' * (63 - (10 + len(hdr)) % 64) + '\n'
open(dst, 'wb').write(b'\x93NUMPY\x01\x00' + len(hdr).to_bytes(2, 'little') + hdr.encode() +
                      open(src, 'rb').read())
PY
}
PHOTO=$WORK/photo.npy ALPHA=$WORK/alpha.npy
npy "$D/photo.rgb" 40 60 "$PHOTO"
npy "$D/alpha.rgb" 24 32 "$ALPHA"

# 1. one turn with an image: as generate --chat --image
printf '/image %s\nWhat is it?\n' "$PHOTO" | chat >"$WORK/c1.out" 2>"$WORK/c1.err"
"$KILN" generate -m "$P" --chat -p "What is it?" --image "$PHOTO" --temp 0 -n 8 \
  >"$WORK/g1.out" 2>/dev/null
if [ -s "$WORK/g1.out" ] && cmp -s "$WORK/c1.out" "$WORK/g1.out"; then
  ok "image_turn_equals_generate ($(head -c 40 "$WORK/c1.out" | tr '\n' ' '))"
else bad image_turn_equals_generate "chat '$(cat "$WORK/c1.out")', generate '$(cat "$WORK/g1.out")': $(tail -2 "$WORK/c1.err")"; fi

# 2. a second turn with another image, against a fresh chat on the same
# conversation (the first answer as chat printed it, without its newline)
printf '/image %s\nWhat is it?\n/image %s\nAnd this one?\n' "$PHOTO" "$ALPHA" |
  chat >"$WORK/c2.out" 2>"$WORK/c2.err"
python3 - "$WORK/c1.out" "$PHOTO" "$ALPHA" "$WORK/m2.json" <<'PY'
import json, sys
a1 = open(sys.argv[1]).read()[:-1]
img = lambda p: {"type": "image", "image": p}
json.dump([{"role": "user", "content": [img(sys.argv[2]), {"type": "text", "text": "What is it?"}]},
           {"role": "assistant", "content": a1},
           {"role": "user", "content": [img(sys.argv[3]), {"type": "text", "text": "And this one?"}]}],
          open(sys.argv[4], "w"))
PY
chat --messages "$WORK/m2.json" </dev/null >"$WORK/f2.out" 2>"$WORK/f2.err"
if [ -s "$WORK/f2.out" ] && cat "$WORK/c1.out" "$WORK/f2.out" | cmp -s - "$WORK/c2.out"; then
  ok "second_image_turn_equals_fresh_chat"
else bad second_image_turn_equals_fresh_chat "chat '$(cat "$WORK/c2.out")', fresh '$(cat "$WORK/f2.out")': $(tail -3 "$WORK/c2.err")"; fi
at=$(sed -n 's/.*turn 2: prefilled [0-9]* new tokens at position \([0-9]*\).*/\1/p' "$WORK/c2.err")
if [ -n "$at" ] && [ "$at" -gt 40 ]; then ok "second_turn_reuses_the_cache (from row $at)"
else bad second_turn_reuses_the_cache "$(grep 'turn 2' "$WORK/c2.err")"; fi
n_enc=$(grep -c "encoded in" "$WORK/c2.err")
if [ "$n_enc" = 2 ]; then ok "each_image_encoded_once"
else bad each_image_encoded_once "$n_enc encodings: $(grep 'encoded in' "$WORK/c2.err")"; fi

# 3. two images in one message, and a third turn of text after them
printf '/image %s\n/image %s\nBoth?\nMore.\n' "$PHOTO" "$ALPHA" | chat >"$WORK/c3.out" 2>"$WORK/c3.err"
"$KILN" generate -m "$P" --chat -p "Both?" --image "$PHOTO" --image "$ALPHA" --temp 0 -n 8 \
  >"$WORK/g3.out" 2>/dev/null
if [ "$(head -c "$(wc -c <"$WORK/g3.out")" "$WORK/c3.out")" = "$(cat "$WORK/g3.out")" ] &&
  grep -q "turn 2: prefilled" "$WORK/c3.err"; then ok "two_images_one_message"
else bad two_images_one_message "chat '$(cat "$WORK/c3.out")', generate '$(cat "$WORK/g3.out")': $(tail -2 "$WORK/c3.err")"; fi

# 4. the context full: turn 1 is dropped, and turn 2's image, of the same
# size as turn 1's and at the same rows, must not take turn 1's cached rows
# (every pad is the same id): as a fresh chat on turn 2 alone
python3 - "$WORK/other.npy" <<'PY'
import sys
h = "{'descr': '|u1', 'fortran_order': False, 'shape': (40, 60, 3), }"
h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
px = bytes((x * 37 + y * 11 + c * 90) % 256 for y in range(40) for x in range(60) for c in range(3))
open(sys.argv[1], 'wb').write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h.encode() + px)
PY
"$KILN" compile "$WORK/vl" -o "$WORK/short.kiln" --prefill 8 --max-seq 48 >/dev/null 2>&1
printf '/image %s\nHi\n/image %s\nHo\n' "$PHOTO" "$WORK/other.npy" |
  "$KILN" chat -m "$WORK/short.kiln" --temp 0 -n 8 >"$WORK/c4.out" 2>"$WORK/c4.err"
echo "[{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"image\": \"$WORK/other.npy\"}, {\"type\": \"text\", \"text\": \"Ho\"}]}]" >"$WORK/m4.json"
"$KILN" chat -m "$WORK/short.kiln" --temp 0 -n 8 --messages "$WORK/m4.json" </dev/null >"$WORK/f4.out" 2>/dev/null
if grep -q "turn 2: context full: dropped the oldest 1 turn" "$WORK/c4.err" &&
  [ "$(tail -n +2 "$WORK/c4.out")" = "$(cat "$WORK/f4.out")" ] &&
  [ "$(head -1 "$WORK/c4.out")" != "$(cat "$WORK/f4.out")" ]; then
  ok "dropped_turn_image_rows_not_reused"
else bad dropped_turn_image_rows_not_reused "chat '$(cat "$WORK/c4.out")', fresh '$(cat "$WORK/f4.out")': $(grep 'turn 2' "$WORK/c4.err")"; fi

# --render-only: image parts as the model's placeholder, in their order
r=$("$KILN" chat -m "$P" --render-only --messages "$WORK/m2.json")
want='<|im_start|>user
<|vision_start|><|image_pad|><|vision_end|>What is it?<|im_end|>'
if [ "${r#"$want"}" != "$r" ]; then ok "render_only_places_images"
else bad render_only_places_images "$(head -3 <<<"$r")"; fi

# the folder's chat_template.json was imported and detected as Qwen3-VL's:
# a later system message is dropped, as that template drops it
echo '[{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "system", "content": "late"}, {"role": "user", "content": "b"}]' >"$WORK/late.json"
r=$("$KILN" chat -m "$P" --render-only --messages "$WORK/late.json")
want=$(printf '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant')
if [ "$r" = "$want" ]; then ok "chat_template_json_is_qwen3vl"
else bad chat_template_json_is_qwen3vl "$r"; fi

# wrong inputs
printf '/image %s\nHi\n' "$WORK/nothing.png" | chat >"$WORK/e1.out" 2>"$WORK/e1.err"
rc=$?
if [ $rc = 1 ] && grep -q "nothing.png': cannot open it" "$WORK/e1.err" && grep -q "turn 1: prefilled" "$WORK/e1.err"; then
  ok "missing_image_is_an_error_and_chat_goes_on"
else bad missing_image_is_an_error_and_chat_goes_on "exit $rc: $(cat "$WORK/e1.err")"; fi
expect image_with_no_message 1 "1 image given with /image, and no message followed" -- \
  bash -c "printf '/image %s\n' '$PHOTO' | $(printf '%q' "$KILN") chat -m '$P' -n 2"
expect image_needs_a_path 1 "/image needs a file" -- \
  bash -c "printf '/image\nHi\n' | $(printf '%q' "$KILN") chat -m '$P' -n 2 --temp 0"
expect typed_placeholder 1 "the prompt holds 1 image placeholder (image pad, id 250) for 0 images" -- \
  bash -c "printf '<|vision_start|><|image_pad|><|vision_end|>Hi\n' | $(printf '%q' "$KILN") chat -m '$P' -n 2"
echo '[{"role": "user", "content": [{"type": "image", "image": "https://example.com/a.png"}]}]' >"$WORK/url.json"
expect url_refused 1 "not URLs or data URIs" -- chat --messages "$WORK/url.json" </dev/null
echo '[{"role": "user", "content": [{"type": "video", "video": "a.mp4"}]}]' >"$WORK/video.json"
expect unknown_part 1 "part 0: type 'video': Kiln reads text and image parts" -- \
  chat --messages "$WORK/video.json" </dev/null
echo "[{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"image\": \"$WORK/cut.npy\"}]}]" >"$WORK/cut.json"
head -c 3000 "$PHOTO" >"$WORK/cut.npy"
expect damaged_history_image 1 "message 0" -- chat --messages "$WORK/cut.json" </dev/null
if "$KILN" compile "$HERE/data/hf/qwen2_bf16" -o "$WORK/text.kiln" >/dev/null 2>&1; then
  expect text_only_image_line 1 "/image: the program has no vision encoder" -- \
    bash -c "printf '/image %s\nHi\n' '$PHOTO' | $(printf '%q' "$KILN") chat -m '$WORK/text.kiln' -n 2 --temp 0"
  expect text_only_image_part 1 "an image, and the program has no vision encoder" -- \
    "$KILN" chat -m "$WORK/text.kiln" --messages "$WORK/m2.json" -n 2
else bad text_only_program "qwen2_bf16 did not compile"; fi
finish

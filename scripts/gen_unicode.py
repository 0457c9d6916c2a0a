#!/usr/bin/env python3
"""gen_unicode.py: writes src/llm/unicode_data.c, the Unicode tables the
tokenizers need, from Python's `unicodedata` module:

  - general category of every code point (runs of equal category),
  - the White_Space property (what regex `\\s` means),
  - simple case folding (for `(?i:...)` in pre-tokenizer regexes),
  - canonical combining classes, canonical decompositions and the primary
    composites (for NFC).

Run:  python3 scripts/gen_unicode.py [--nfc-python PYTHON] > src/llm/unicode_data.c

The reference is Hugging Face `tokenizers`, and it mixes two Unicode
versions, so the committed tables do too (both stated in the output):

  - categories: Unicode 16.0.0, the data of the Oniguruma inside `tokenizers`
    0.2x, which decides \\p{L} / \\p{N} in the pre-tokenizer regexes (U+1C89,
    new in 16.0, is a letter there; U+088F, new in 17.0, is not). Python's own
    unicodedata lags (3.11: 14.0, 3.13: 15.1), so the script takes
    `unicodedata2` (PyPI: the same module with newer data) when installed;
  - NFC: Unicode 9.0.0, the data of the normalization crate inside
    `tokenizers` (it does not reorder U+0D3C, whose combining class 9 came in
    10.0). Python 3.6's unicodedata is 9.0.0; --nfc-python runs this script
    under that Python for the NFC tables only.

The committed file was made with
    pip install unicodedata2==16.0.0
    python3 scripts/gen_unicode.py --nfc-python ~/.pyenv/versions/3.6.15/bin/python3
Case folding and White_Space come from the running Python's str methods
(only folds onto ASCII letters matter for the known patterns).
"""
import json
import subprocess
import sys

try:
    import unicodedata2 as ud
except ImportError:
    import unicodedata as ud

MAX = 0x110000
CATS = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
        "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
CAT_INDEX = {c: i for i, c in enumerate(CATS)}


def out(s=""):
    sys.stdout.write(s + "\n")


def emit_u32(name, values, per_line=8, comment=""):
    out(f"/* {comment} */" if comment else "")
    out(f"const uint32_t {name}[] = {{")
    for i in range(0, len(values), per_line):
        out("    " + " ".join(f"0x{v:08X}," for v in values[i:i + per_line]))
    out("};")
    out(f"const size_t {name}_len = {len(values)};")


def nfc_tables(u):
    """Combining classes, decompositions and composites of module u (kept
    runnable by Python 3.6, for --nfc-json)."""
    # Canonical combining class: runs of equal class, u32 = start | ccc << 24.
    ccc_runs, prev = [], None
    for cp in range(MAX):
        c = u.combining(chr(cp))
        if c != prev:
            ccc_runs.append(cp | (c << 24))
            prev = c

    # Canonical decompositions (one level; the C code recurses). Hangul
    # syllables are algorithmic and left out.
    decomp = []
    for cp in range(MAX):
        if 0xAC00 <= cp <= 0xD7A3:
            continue
        d = u.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, (hex(cp), d)
        decomp.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))

    # Primary composites: pairs whose composition NFC keeps (this leaves out
    # the composition exclusions, singletons and non-starter decompositions).
    comp = []
    for cp, a, b in decomp:
        if b and u.normalize("NFC", chr(cp)) == chr(cp) and u.combining(chr(cp)) == 0 \
                and u.normalize("NFC", chr(a) + chr(b)) == chr(cp):
            comp.append((a, b, cp))
    comp.sort()
    return {"version": u.unidata_version, "ccc_runs": ccc_runs, "decomp": decomp, "comp": comp}


def main():
    if "--nfc-json" in sys.argv:
        import unicodedata
        json.dump(nfc_tables(unicodedata), sys.stdout)
        return

    # General category: runs, each u32 = start | category << 24.
    runs, prev = [], None
    for cp in range(MAX):
        c = CAT_INDEX[ud.category(chr(cp))]
        if c != prev:
            runs.append(cp | (c << 24))
            prev = c

    # White_Space (the property regex engines use for \s). Python's
    # str.isspace() also counts U+001C..U+001F (bidi class B/S), which are not
    # White_Space; everything else agrees.
    ws = [cp for cp in range(MAX) if chr(cp).isspace() and not 0x1C <= cp <= 0x1F]

    # Simple case folding: the one-code-point folding of each code point
    # (full foldings longer than one code point fall back to the lowercase
    # mapping when that is one code point, as CaseFolding.txt's S entries do).
    fold = []
    for cp in range(MAX):
        ch = chr(cp)
        f = ch.casefold()
        if len(f) != 1:
            f = ch.lower() if len(ch.lower()) == 1 else ch
        if f != ch:
            fold.append((cp, ord(f)))

    if "--nfc-python" in sys.argv:
        py = sys.argv[sys.argv.index("--nfc-python") + 1]
        nfc = json.loads(subprocess.run([py, __file__, "--nfc-json"], check=True,
                                        stdout=subprocess.PIPE).stdout.decode())
    else:
        nfc = nfc_tables(ud)
    ccc_runs, decomp, comp = nfc["ccc_runs"], nfc["decomp"], nfc["comp"]

    # Below this code point NFC changes nothing: no decomposition, class 0,
    # and never the second of a composing pair.
    nfc_min = min([cp for cp, _, _ in decomp] + [b for _, b, _ in comp] +
                  [r & 0xFFFFFF for r in ccc_runs if r >> 24])

    out("/* unicode_data.c: GENERATED by scripts/gen_unicode.py from Python's unicodedata:")
    out(f" * categories Unicode {ud.unidata_version}, NFC Unicode {nfc.get('version', ud.unidata_version)}.")
    out(" * Do not edit; rerun the script (see it for why two versions). */")
    out('#include "llm/unicode.h"')
    out()
    out(f'const char kiln_uc_version[] = "{ud.unidata_version}";')
    out(f'const char kiln_uc_nfc_version[] = "{nfc.get("version", ud.unidata_version)}";')
    out(f"const uint32_t kiln_ucd_nfc_min = 0x{nfc_min:04X};")
    emit_u32("kiln_ucd_cat_runs", runs, comment="general category runs: start | category << 24 (category: enum kiln_uc_cat)")
    emit_u32("kiln_ucd_space", ws, comment="White_Space code points")
    emit_u32("kiln_ucd_fold", [v for p in fold for v in p],
             comment="simple case folding: pairs (code point, folded), sorted")
    emit_u32("kiln_ucd_ccc_runs", ccc_runs, comment="canonical combining class runs: start | class << 24")
    emit_u32("kiln_ucd_decomp", [v for t in decomp for v in t], per_line=9,
             comment="canonical decompositions: triples (code point, first, second or 0), sorted")
    emit_u32("kiln_ucd_comp", [v for t in comp for v in t], per_line=9,
             comment="primary composites: triples (first, second, composite), sorted by (first, second)")


if __name__ == "__main__":
    main()

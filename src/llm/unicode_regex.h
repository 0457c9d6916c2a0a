/* unicode_regex.h: the regular expressions of tokenizer pre-tokenizers
 * (`tokenizer.json` Split patterns, the GPT-2 / Llama-3 / Qwen2 splits),
 * matched over code points with Oniguruma's leftmost-first backtracking
 * semantics. Internal: never installed.
 *
 * Supported: literals and escapes (\r \n \t \f \v \e \a \0 \xHH \x{H..}
 * \uHHHH, escaped punctuation); `.`; classes [...] with ranges, negation and
 * the escapes below; \s \S (White_Space) \d \D (Nd) \w \W (L, M, Nd, Pc);
 * \p{..} \P{..} \pX with general categories (L, Lu, ..., Cn, and the long
 * names Letter, Mark, Number, Punctuation, Symbol, Separator, Other);
 * groups ( ), (?: ), (?<name> ), (?i: ), (?-i: ), (?i) (case-insensitive by
 * simple case folding); lookahead (?= ) (?! ); quantifiers ? * + {n} {n,}
 * {n,m}, lazy (?) and possessive (+) forms; anchors ^ $ (line) \A \z \Z.
 * Anything else is refused at compile time with KILN_ERR_UNSUPPORTED naming
 * the offset, never guessed. */
#ifndef KILN_LLM_UNICODE_REGEX_H
#define KILN_LLM_UNICODE_REGEX_H

#include "base/base.h"

typedef struct kiln_regex kiln_regex;

/* Compiles pattern[0..len) (UTF-8). */
kiln_status kiln_regex_compile(const char *pattern, size_t len, kiln_regex **out);
void kiln_regex_free(kiln_regex *re);

/* Finds the leftmost match starting at or after `from` in s[0..n) (code
 * points; lookahead and anchors see exactly s[0..n)). Returns 1 with the
 * match in [*begin, *end), 0 when there is none, or a negative kiln_status
 * (message set) when the match would take more backtracking than allowed.
 * Thread-safe: the compiled expression is not modified. */
int kiln_regex_find(const kiln_regex *re, const uint32_t *s, size_t n, size_t from, size_t *begin,
                    size_t *end);

#endif

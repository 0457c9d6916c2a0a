/* tokenizer.h: internal tokenizer interface (serialization for programs). */
#ifndef KILN_LLM_TOKENIZER_H
#define KILN_LLM_TOKENIZER_H

#include "base/base.h"
#include "kiln/kiln_llm.h"

#define KILN_TOK_SPM_LLAMA2C 1 /* SentencePiece-style BPE over scores, byte fallback, run.c rules */

/* Appends the tokenizer's program-section form to b. */
void kiln_tokenizer_serialize(const kiln_tokenizer *tok, kiln_wbuf *b);
/* Parses the program-section form (checks every field). */
kiln_status kiln_tokenizer_deserialize(const uint8_t *data, size_t len, const char *what,
                                       kiln_tokenizer **out);

#endif

/* tokenizer.h: the tokenizer's internals, shared by tokenizer.c (API,
 * program-section form, decoding), tokenizer_spm.c (SentencePiece-style BPE
 * over scores), tokenizer_bpe.c (byte-level BPE, added tokens,
 * pre-tokenizer splits) and the builders in src/import/ (llama2c.c:
 * tokenizer.bin; tokenizer.c: GGUF metadata and tokenizer.json), which fill
 * the struct and finish it with kiln_tok_finish_*. Internal: never
 * installed. */
#ifndef KILN_LLM_TOKENIZER_H
#define KILN_LLM_TOKENIZER_H

#include "base/base.h"
#include "ir/graph.h"
#include "kiln/kiln_llm.h"
#include "llm/unicode_regex.h"

/* Section types (the first u32 of the blob; layouts in tokenizer.c). */
#define KILN_TOK_SPM_LLAMA2C 1 /* llama2.c tokenizer.bin: pieces with scores, run.c rules */
#define KILN_TOK_TABLES 2      /* byte-level BPE or SentencePiece BPE, described by tables */

/* Limits of the section form, which every builder keeps to. */
#define KILN_TOK_MAX_VOCAB (1 << 22) /* tokens */
#define KILN_TOK_MAX_PIECE 65536     /* bytes of a piece, an added token or a pattern */

/* KILN_TOK_TABLES models. */
enum { KILN_TOKM_BPE = 1, KILN_TOKM_SPM = 2 };

/* KILN_TOK_TABLES flags. */
#define KILN_TOKF_ADD_BOS 1u        /* add_special puts BOS first */
#define KILN_TOKF_ADD_EOS 2u        /* add_special puts EOS last */
#define KILN_TOKF_SPACE_PREFIX 4u   /* SPM: a space before the text and after every added token */
#define KILN_TOKF_NFC 8u            /* NFC-normalize text between added tokens */
#define KILN_TOKF_IGNORE_MERGES 16u /* BPE: a pre-token that is a whole token is not merged */
#define KILN_TOKF_ALL 31u

/* Token kinds: the numbering of GGUF's tokenizer.ggml.token_type. */
enum {
    KILN_TOKK_NORMAL = 1,
    KILN_TOKK_UNKNOWN = 2,
    KILN_TOKK_CONTROL = 3, /* special tokens (BOS, EOS, <|im_start|>, ...) */
    KILN_TOKK_USER = 4,    /* added tokens that are not special */
    KILN_TOKK_UNUSED = 5,  /* also ids no token has */
    KILN_TOKK_BYTE = 6,    /* SPM <0xNN> */
};

/* Added-token flags (matched in the text before any other step). */
#define KILN_TOKA_SPECIAL 1u     /* not matched with KILN_TOKENIZE_PLAIN_SPECIAL */
#define KILN_TOKA_LSTRIP 2u      /* swallows the whitespace before it */
#define KILN_TOKA_RSTRIP 4u      /* swallows the whitespace after it */
#define KILN_TOKA_SINGLE_WORD 8u /* only between non-word characters */
#define KILN_TOKA_ALL 15u

typedef struct kiln_tok_added {
    int32_t id;
    uint32_t flags;
    char *text;
    uint32_t len;
} kiln_tok_added;

struct kiln_tokenizer {
    int type;  /* KILN_TOK_* */
    int model; /* KILN_TOK_TABLES: KILN_TOKM_* */
    uint32_t flags;
    int n_vocab;
    int bos, eos, unk; /* -1 when none */
    int max_len;       /* longest piece, bytes */
    char **pieces; /* the pieces, NUL-terminated copies (TABLES BPE: the bytes each decodes to) */
    uint32_t *lens;
    float *scores;
    uint8_t *kinds; /* TABLES: KILN_TOKK_* per id */
    /* llama2c: ids sorted by piece bytes, for lookup */
    int *sorted;
    int byte_id[256]; /* llama2c/SPM: the <0xNN> token; BPE: the token of the single byte; -1 */
    char bytes[256][2];
    /* TABLES SPM: what each piece decodes to (U+2581 as a space, bytes as bytes) */
    char **dec;
    uint32_t *dec_lens;
    /* TABLES: piece bytes -> id, over normal and user tokens (open addressing) */
    int32_t *pmap;
    uint32_t pmap_mask;
    /* TABLES BPE: merges (left, right, result), rank = index; (left, right) -> index */
    int32_t *merges;
    int n_merges;
    uint64_t *mkeys;
    int32_t *mvals;
    uint32_t mmap_mask;
    /* Added tokens, and for each first byte the indices of those starting with it, longest first.
     */
    kiln_tok_added *added;
    int n_added;
    int *added_by_byte; /* n_added indices grouped by first byte */
    int added_start[257];
    /* Pre-tokenizer: regexes applied in order, each splitting every piece into matches and gaps. */
    char **split_src;
    uint32_t *split_lens;
    kiln_regex **split;
    int n_split;
};

/* Appends the tokenizer's program-section form to b. */
void kiln_tokenizer_serialize(const kiln_tokenizer *tok, kiln_wbuf *b);
/* Parses the program-section form (checks every field). */
kiln_status kiln_tokenizer_deserialize(const uint8_t *data, size_t len, const char *what,
                                       kiln_tokenizer **out);

/* ---- shared by the tokenizer files and the builders -------------------------------------- */

/* A growable id list. */
typedef struct {
    int32_t *ids;
    int n, cap;
    int failed;
} kiln_tok_ids;
void kiln_tok_ids_push(kiln_tok_ids *v, int32_t id);

kiln_tokenizer *kiln_tok_alloc(int n_vocab, int type);
/* Builds the lookup tables of a KILN_TOK_TABLES tokenizer from its fields and
 * checks them (what: for messages). */
kiln_status kiln_tok_finish_tables(kiln_tokenizer *t, const char *what);
/* KILN_TOK_SPM_LLAMA2C: reads t->n_vocab {f32 score, i32 length
 * 0..max_len, bytes} records from r (tokenizer.bin's records and the
 * section's are the same), then builds the sorted lookup and the byte
 * tokens. */
kiln_status kiln_tok_read_llama2c(kiln_tokenizer *t, kiln_rbuf *r, uint32_t max_len);
kiln_status kiln_tok_finish_llama2c(kiln_tokenizer *t);
/* The hash of a merge's (left, right) pair (TABLES merge table). */
static inline uint32_t kiln_tok_hash_pair(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* Lowest normal/user id whose piece is s[0..n), or -1 (TABLES). */
int kiln_tok_lookup(const kiln_tokenizer *t, const char *s, size_t n);

/* Lowest id whose piece is s[0..n), or -1 (llama2c). */
int kiln_tok_llama2c_lookup(const kiln_tokenizer *t, const char *s, uint32_t n);

/* The encoders. Each appends to out; failure sets the message. */
kiln_status kiln_tok_encode_llama2c(const kiln_tokenizer *t, const char *text, size_t len,
                                    int add_bos, kiln_tok_ids *out);
kiln_status kiln_tok_encode_tables(const kiln_tokenizer *t, const char *text, size_t len,
                                   unsigned flags, kiln_tok_ids *out);
/* One run of text between added tokens: SPM (after_added: it follows an
 * added token or starts the text) and byte-level BPE. */
kiln_status kiln_tok_spm_text(const kiln_tokenizer *t, const char *text, size_t len,
                              int after_added, kiln_tok_ids *out);
kiln_status kiln_tok_bpe_text(const kiln_tokenizer *t, const char *text, size_t len,
                              kiln_tok_ids *out);

/* GPT-2's byte <-> character table of byte-level BPE vocabularies:
 * kiln_tok_byte_char(b) is the code point byte b is written as. */
uint32_t kiln_tok_byte_char(uint8_t b);
/* The bytes a byte-level vocabulary string decodes to: each character
 * mapped back to its byte, or, when one character is not in the table, the
 * string's UTF-8 as it is (as Hugging Face's ByteLevel decoder). Writes at
 * most len bytes to out (never more than the input); returns the count. */
size_t kiln_tok_byte_decode(const char *s, size_t len, char *out);

#endif

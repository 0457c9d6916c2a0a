/* fixtures.h: what tests build for themselves: tiny random llama2.c
 * checkpoints and tokenizers written through the real formats, and an
 * independent, straightforward forward pass (double accumulation) to check
 * Kiln's logits against. */
#ifndef KILN_TEST_FIXTURES_H
#define KILN_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int dim, hidden, layers, heads, kv_heads, vocab, seq;
    int shared_classifier; /* 1: vocab_size written positive */
    unsigned long long seed;
} kt_l2c_config;

/* Writes a llama2.c checkpoint with random weights; 0 on success. */
int kt_write_llama2c(const char *path, const kt_l2c_config *c);
/* The same bytes in memory (malloc'd), for damaging. */
uint8_t *kt_llama2c_bytes(const kt_l2c_config *c, size_t *len);

/* Writes a llama2.c tokenizer.bin with `vocab` pieces: <unk>, <s>, </s>,
 * the 256 byte pieces <0x00>..<0xFF>, then single letters, a space and
 * merged pieces up to `vocab`. */
int kt_write_tokenizer(const char *path, int vocab);
uint8_t *kt_tokenizer_bytes(int vocab, size_t *len);

/* Reference forward pass read straight from a checkpoint file. */
typedef struct kt_oracle kt_oracle;
kt_oracle *kt_oracle_load(const char *path);
void kt_oracle_free(kt_oracle *o);
void kt_oracle_reset(kt_oracle *o);
/* Runs token at pos (pos must be the next position) and writes vocab logits. */
void kt_oracle_forward(kt_oracle *o, int token, int pos, float *logits);
int kt_oracle_vocab(const kt_oracle *o);
/* 1: keys and values are rounded to f16 when stored, as in an f16 KV cache
 * (the default `--kv-type`); 0 (the default): kept in double. */
void kt_oracle_set_kv_f16(kt_oracle *o, int on);

/* max |a - b| / max |b| */
double kt_rel_err(const float *a, const float *b, int n);

/* Compiles `model` (+ optional tokenizer) into `out` with the library; 0 ok. */
int kt_compile(const char *model, const char *tokenizer, const char *out, int prefill, int max_seq,
               const char *backends);
/* The same with a KV cache type ("f16", "f32"; NULL = the compiler's default, f16). */
int kt_compile_kv(const char *model, const char *tokenizer, const char *out, int prefill,
                  int max_seq, const char *backends, const char *kv_type);

#endif

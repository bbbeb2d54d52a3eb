/*
 * Unicode Normalization Form C for tokenizer.json files whose normalizer is
 * NFC (Qwen2): canonical decomposition, canonical ordering of combining
 * marks, canonical composition (UAX #15), over Unicode 14.0 data generated
 * into tokenizer/nfc_table.c. Bytes that are not valid UTF-8 pass through
 * unchanged and block composition across them. Text without any character
 * that NFC could change (checked first, one bit per code point) is not
 * copied. This file knows nothing about tokens.
 */
#ifndef KVLM_TOKENIZER_NFC_H
#define KVLM_TOKENIZER_NFC_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_nfc_decomp_entry {
    uint32_t cp, first, second;   /* second 0: a singleton mapping */
    uint32_t primary;             /* 1: recomposed by NFC */
} tok_nfc_decomp_entry;

typedef struct tok_nfc_ccc_range {
    uint32_t lo, hi, ccc;
} tok_nfc_ccc_range;

extern const tok_nfc_decomp_entry tok_nfc_decomp[];
extern const size_t tok_nfc_n_decomp;
extern const tok_nfc_ccc_range tok_nfc_ccc[];
extern const size_t tok_nfc_n_ccc;

/* NFC of s[0..n). Returns 0 if s is already in NFC (nothing written), 1 if
 * the normal form differs (it is in (*buf)[0..*out_n), *buf grown as
 * needed), -1 if out of memory. */
int tok_nfc(const unsigned char *s, size_t n, unsigned char **buf, size_t *cap, size_t *out_n);

#endif

/*
 * kvlm tokenizer API: byte-level BPE (GPT-2, Llama 3, Qwen2) and
 * SentencePiece-style BPE with byte fallback (Llama 2), loaded from the
 * files a checkpoint ships with (or built from GGUF metadata by the GGUF
 * loader), exact encode/decode and a streaming UTF-8 assembler that never
 * emits half a character. Included by kvlm.h.
 *
 * Supported files: tokenizer.json (Hugging Face: BPE model; ByteLevel
 * pre-tokenizer alone or after Split patterns; or the Llama 2 pipeline of
 * Prepend/Replace or Metaspace with byte_fallback; NFC; added_tokens;
 * TemplateProcessing post-processor), vocab.json + merges.txt,
 * encoder.json + vocab.bpe. Bytes that are not valid UTF-8 are encoded like
 * any other bytes (each one a non-letter, non-number character; a byte
 * token under byte fallback) and decode back to themselves. See
 * docs/tokenizer.md.
 *
 * A tokenizer may be used by several threads at once (encode, decode,
 * piece); kvlm_tokenizer_set_cache and kvlm_tokenizer_free may not run
 * concurrently with anything else on the same tokenizer.
 */
#ifndef KVLM_TOKENIZER_H
#define KVLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default) /* exported from libkvlm.so (see kvlm.h) */
#endif

struct kvlm_error;
typedef struct kvlm_tokenizer kvlm_tokenizer;

/* path: a model directory holding any supported tokenizer files, or one of
 * those files (tokenizer.json, vocab.json, encoder.json). A directory is
 * searched for tokenizer.json, then vocab.json + merges.txt, then
 * encoder.json + vocab.bpe. */
kvlm_tokenizer *kvlm_tokenizer_load(const char *path, struct kvlm_error *err);
void kvlm_tokenizer_free(kvlm_tokenizer *t);
/* Largest token id + 1 (50257 for GPT-2). */
int kvlm_tokenizer_vocab_size(const kvlm_tokenizer *t);

/* Encodes len bytes of text. Special tokens (<|endoftext|>) are matched only
 * when allow_special is non-zero; otherwise they are encoded as plain text.
 * Added tokens that are not special are always matched. *ids is malloc'ed;
 * the caller frees it. Returns 0, or a negative kvlm_status with err set. */
int kvlm_tokenizer_encode(const kvlm_tokenizer *t, const char *text, size_t len,
                          int allow_special, int32_t **ids, size_t *n_ids,
                          struct kvlm_error *err);

/* Flags of kvlm_tokenizer_encode_ex. */
#define KVLM_ENCODE_ALLOW_SPECIAL 1u   /* match special tokens in the text */
#define KVLM_ENCODE_ADD_SPECIAL 2u     /* add the tokens the tokenizer puts around
                                          a text (BOS when kvlm_tokenizer_add_bos) */

/* kvlm_tokenizer_encode with flags; kvlm_tokenizer_encode(.., 1, ..) is
 * kvlm_tokenizer_encode_ex(.., KVLM_ENCODE_ALLOW_SPECIAL, ..). */
int kvlm_tokenizer_encode_ex(const kvlm_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t **ids, size_t *n_ids,
                             struct kvlm_error *err);

/* Encodes a prompt for generation the way the model's files ask: with
 * KVLM_ENCODE_ADD_SPECIAL (BOS in front when kvlm_tokenizer_add_bos says
 * so, and whatever else tokenizer_config.json adds) and special tokens
 * matched when allow_special is set. A text that already begins with the
 * BOS token (a chat template that writes it) does not get a second one.
 * What kvlm run -p, kvlm serve and its /tokenize use. */
int kvlm_tokenizer_encode_prompt(const kvlm_tokenizer *t, const char *text, size_t len,
                                 int allow_special, int32_t **ids, size_t *n_ids,
                                 struct kvlm_error *err);

/* Concatenates the bytes of n tokens into a malloc'ed buffer (NUL added
 * after *len bytes; the text itself may contain NULs). For SentencePiece
 * vocabularies "▁" prints as a space, a byte token as its byte, and one
 * leading space is dropped when the file's decoder says so. Fails with
 * KVLM_ERR_ARG on an id that is not a token. Returns 0 or a negative status. */
int kvlm_tokenizer_decode(const kvlm_tokenizer *t, const int32_t *ids, size_t n,
                          char **text, size_t *len, struct kvlm_error *err);

/* The bytes one token prints (not NUL-terminated): raw bytes for byte-level
 * vocabularies, "▁" as a space and <0xXX> as its byte for SentencePiece
 * ones (no leading space dropped); NULL if id is out of range. */
const char *kvlm_tokenizer_piece(const kvlm_tokenizer *t, int32_t id, size_t *len);
/* The id of the token whose vocabulary entry is exactly piece[0..len)
 * (raw bytes for byte-level vocabularies, the string as written, e.g.
 * "\xE2\x96\x81the", for SentencePiece ones), or KVLM_NO_TOKEN (-1). */
int32_t kvlm_tokenizer_token_id(const kvlm_tokenizer *t, const char *piece, size_t len);
/* Id of the end-of-text token (tokenizer_config.json's eos_token, GGUF's
 * eos id, else <|endoftext|>, <|end_of_text|> or </s>), or KVLM_NO_TOKEN. */
int32_t kvlm_tokenizer_eos_id(const kvlm_tokenizer *t);
/* Id of the beginning-of-text token (<s>, <|begin_of_text|>, ...), or
 * KVLM_NO_TOKEN. */
int32_t kvlm_tokenizer_bos_id(const kvlm_tokenizer *t);
/* 1 if the tokenizer puts BOS (or other tokens) in front of a text it
 * encodes with KVLM_ENCODE_ADD_SPECIAL (tokenizer.json's post_processor,
 * tokenizer_config.json's add_bos_token, GGUF's add_bos_token). */
int kvlm_tokenizer_add_bos(const kvlm_tokenizer *t);

/* What a GGUF file says about chat, for a chat-template renderer (kvlm
 * serve, kvlm chat): its templates and the text of its BOS and EOS
 * tokens. Each string is malloc'ed, NUL-terminated, and NULL when the
 * file does not have it. */
typedef struct kvlm_gguf_chat {
    char *chat_template;     /* tokenizer.chat_template */
    char *tool_use_template; /* tokenizer.chat_template.tool_use */
    char *bos_token;         /* the token tokenizer.ggml.bos_token_id names */
    char *eos_token;         /* the token tokenizer.ggml.eos_token_id names */
} kvlm_gguf_chat;
/* Reads them from the GGUF file at path (kvlm_model_tokenizer_path of a
 * GGUF model) without loading the model. Returns 0, or a negative
 * kvlm_status naming the file or the key (a tokenizer.chat_template that
 * is not a string: KVLM_ERR_FORMAT; a tool_use one is then left out);
 * out is then all NULL. */
int kvlm_gguf_chat_load(const char *path, kvlm_gguf_chat *out, struct kvlm_error *err);
void kvlm_gguf_chat_free(kvlm_gguf_chat *c);
/* 1 if id is a special token (matched in text only when allowed). */
int kvlm_tokenizer_is_special(const kvlm_tokenizer *t, int32_t id);
/* The file(s) the tokenizer was loaded from, for messages. */
const char *kvlm_tokenizer_source(const kvlm_tokenizer *t);
/* Number of merges (50000 for GPT-2). */
size_t kvlm_tokenizer_n_merges(const kvlm_tokenizer *t);

/* Replaces the cache of merged words with an empty one holding up to
 * max_words words (0 turns it off; the default is 65536). The cache only
 * changes speed, never ids. For benchmarks: cold vs warm vs no cache.
 * Returns 0, KVLM_ERR_ARG above 2^24 words, or KVLM_ERR_NOMEM. */
int kvlm_tokenizer_set_cache(kvlm_tokenizer *t, size_t max_words, struct kvlm_error *err);

/* Streaming UTF-8 assembler: bytes of an incomplete sequence are held until
 * it completes; kvlm_utf8_flush emits whatever is left as-is. Bytes that
 * cannot be part of a well-formed sequence are emitted as they arrive.
 * Zero-initialise before use. */
typedef struct kvlm_utf8_stream {
    unsigned char pending[4];
    int n_pending;
} kvlm_utf8_stream;

/* Appends n bytes; writes the printable prefix to out (capacity n + 4 is
 * always enough) and returns the number of bytes written. */
size_t kvlm_utf8_push(kvlm_utf8_stream *s, const char *bytes, size_t n, char *out);
size_t kvlm_utf8_flush(kvlm_utf8_stream *s, char *out);

/* Length of the well-formed UTF-8 sequence starting at p (n bytes
 * available), or 0 if the bytes there are not one. */
size_t kvlm_utf8_char_len(const char *p, size_t n);

/* Copies n bytes to out with every byte that does not begin a well-formed
 * UTF-8 sequence replaced by U+FFFD (out needs 3 x n bytes at most);
 * returns the bytes written. What text needs before it goes into JSON. */
size_t kvlm_utf8_sanitize(const char *in, size_t n, char *out);

/* Fill-in-the-middle tokens (code models): the prefix, suffix and middle
 * markers a FIM prompt is built from, the padding token, and the repository
 * and file separators of repository-level prompts. */
typedef enum kvlm_fim_token {
    KVLM_FIM_PRE = 0,   /* <|fim_prefix|>, <fim_prefix>, <PRE> ... */
    KVLM_FIM_SUF = 1,   /* <|fim_suffix|>, <fim_suffix>, <SUF> ... */
    KVLM_FIM_MID = 2,   /* <|fim_middle|>, <fim_middle>, <MID> ... */
    KVLM_FIM_PAD = 3,   /* <|fim_pad|>, <fim_pad> ... */
    KVLM_FIM_REP = 4,   /* <|repo_name|>, <|fim_repo|>, <reponame> ... */
    KVLM_FIM_SEP = 5,   /* <|file_sep|> */
    KVLM_FIM_COUNT = 6
} kvlm_fim_token;
/* The id of a fill-in-the-middle token, or KVLM_NO_TOKEN (-1) when the
 * model's files name none (also for a `which` out of range). A GGUF file's
 * tokenizer.ggml.fim_*_token_id (or prefix/suffix/middle_token_id) comes
 * first; otherwise a vocabulary or added token with one of the names
 * code models use (docs/tokenizer.md lists them). */
int32_t kvlm_tokenizer_fim_id(const kvlm_tokenizer *t, kvlm_fim_token which);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* KVLM_TOKENIZER_H */

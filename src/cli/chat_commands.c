/* The slash commands of kvlm chat (see chat_commands.h). */
#include "cli/chat_commands.h"

#include <stdlib.h>
#include <string.h>

#include "cli/chat_color.h"
#include "cli/chat_file.h"
#include "cli/chat_models.h"

void chat_state_forget_ids(chat_state *st) {
    free(st->ids);
    st->ids = NULL;
    st->n_ids = 0;
}

/* 1 when the file name ends in ".json". */
static int is_json_name(const char *s) {
    size_t n = strlen(s);
    return n >= 5 && !strcmp(s + n - 5, ".json");
}

static int save(chat_state *st, const char *path) {
    char msg[600];
    if (is_json_name(path)) {
        if (chat_conv_save(&st->conv, path, msg, sizeof msg)) {
            fprintf(st->info, "/save: %s\n", msg);
            return -1;
        }
        fprintf(st->info, "saved %zu messages to %s\n", chat_conv_len(&st->conv), path);
        return 0;
    }
    chat_file_kv k;
    if (chat_file_save(path, &st->conv, st->template_origin, st->kv, st->m, st->ids, st->n_ids, &k, msg,
                       sizeof msg)) {
        fprintf(st->info, "/save: %s\n", msg);
        return -1;
    }
    if (k.tokens)
        fprintf(st->info, "saved %zu messages and the KV of %d tokens to %s (%.1f ms)\n", chat_conv_len(&st->conv),
                k.tokens, path, k.ms);
    else
        fprintf(st->info, "saved %zu messages to %s without KV: %s\n", chat_conv_len(&st->conv), path, k.why);
    return 0;
}

static int load(chat_state *st, const char *path) {
    char msg[600];
    chat_file_kv k;
    int32_t *ids;
    int n_ids;
    if (chat_file_load(path, &st->conv, st->kv, st->m, &ids, &n_ids, &k, msg, sizeof msg)) {
        fprintf(st->info, "/load: %s\n", msg);
        return -1;
    }
    chat_state_forget_ids(st);
    st->ids = ids;
    st->n_ids = n_ids;
    st->last.valid = 0;
    if (k.tokens)
        fprintf(st->info, "loaded %zu messages and the KV of %d tokens from %s in %.1f ms (no prefill)\n",
                chat_conv_len(&st->conv), k.tokens, path, k.ms);
    else
        fprintf(st->info, "loaded %zu messages from %s; KV not restored (%s): the next reply computes the "
                "conversation again\n", chat_conv_len(&st->conv), path, k.why);
    if (k.template_origin[0] && st->template_origin && strcmp(k.template_origin, st->template_origin))
        fprintf(st->info, "note: the conversation was saved with chat template %s; this chat renders it with %s\n",
                k.template_origin, st->template_origin);
    return 0;
}

void chat_help(const chat_state *st, FILE *f) {
    fputs("commands:\n"
          "  /help          this help\n"
          "  /reset         start a new conversation (the system message stays)\n"
          "  /system TEXT   set the system message (/system alone removes it)\n"
          "  /stats         the last reply: tokens, time to first token, time per token,\n"
          "                 tokens/s, the conversation's KV cache bytes and blocks (and the\n"
          "                 KV tiers' restores with --kv-cache-dir or --kv-ram-bytes)\n"
          "  /save FILE     write the conversation and its KV cache (FILE.json: the messages\n"
          "                 as JSON only, {\"messages\": [...]})\n"
          "  /load FILE     replace the conversation with a saved one, its KV restored\n"
          "                 without prefill when the file was saved from this model and setting\n"
          "  /models        the models given (-m, --models-dir), the one in use marked *\n"
          "  /model NAME    the next replies come from model NAME; the conversation stays,\n"
          "                 rendered with its template (the next reply prefills it again)\n"
          "  /reasoning show|hide  show a reasoning model's reasoning before its answer\n"
          "                 (dimmed, after [reasoning]) or not; alone: which it is\n"
          "  /quit          exit (also Ctrl-D, or Ctrl-C at an empty prompt)\n"
          "keys:\n"
          "  a line ending in \\ continues the message on the next line\n"
          "  Ctrl-C while a reply streams stops it (it stays in the conversation)\n"
          "  Ctrl-C while typing drops the message; Backspace, Ctrl-U edit the line\n",
          f);
    if (st->color) chat_color_legend(f);
}

void chat_stats_record(chat_reply_stats *s, int prompt_tokens, const gen_result *g) {
    *s = (chat_reply_stats){.valid = 1, .prompt_tokens = prompt_tokens, .cached_tokens = g->cached,
                            .generated = g->n_ids, .finish = g->finish, .ttft_ms = g->ttft_s * 1e3,
                            .kv = g->kv};
    s->tpot_ms = g->decode_steps ? g->decode_s * 1e3 / g->decode_steps : 0;
    s->tokens_per_s = g->decode_s > 0 ? g->decode_steps / g->decode_s : 0;
}

static const char *finish_words(kvlm_finish f) {
    switch (f) {
    case KVLM_FINISH_STOP: return "end of turn";
    case KVLM_FINISH_LENGTH: return "token limit or context window";
    case KVLM_FINISH_CANCELLED: return "stopped";
    default: return "error";
    }
}

static void print_stats(const chat_state *st) {
    const chat_reply_stats *s = &st->last;
    FILE *f = st->info;
    if (!s->valid) {
        fputs("no reply yet\n", f);
        return;
    }
    fprintf(f, "prompt tokens        %d (%d reused from the KV cache, %d prefilled)\n", s->prompt_tokens,
            s->cached_tokens, s->prompt_tokens - s->cached_tokens);
    fprintf(f, "generated tokens     %d (%s)\n", s->generated, finish_words(s->finish));
    if (s->generated > 0) fprintf(f, "time to first token  %.2f ms\n", s->ttft_ms);
    if (s->generated > 1) /* a time per token needs tokens after the first */
        fprintf(f, "time per out token   %.2f ms (%.1f tokens/s)\n", s->tpot_ms, s->tokens_per_s);
    fprintf(f, "KV conversation      %zu tokens x %zu bytes (%s) = %zu bytes\n", s->kv.tokens,
            s->kv.bytes_per_token, kvlm_dtype_name(st->kv_dtype), s->kv.tokens * s->kv.bytes_per_token);
    fprintf(f, "KV blocks            %zu of %d tokens = %zu bytes reserved (paged)\n", s->kv.blocks_used,
            st->block_size, s->kv.bytes_reserved);
    kvlm_kv_stats ks;
    if (st->kv) kvlm_kv_get_stats(st->kv, &ks);
    if (st->kv && (ks.tier_disk_files || ks.tier_ram_blocks || ks.tier_ram_hits || ks.tier_disk_hits ||
                   ks.tier_bytes_written)) /* --kv-cache-dir, --kv-ram-bytes */
        fprintf(f, "KV tiers             %llu blocks restored from memory, %llu from disk (%llu bytes read, %.2f ms), "
                "%llu bytes written\n", (unsigned long long)ks.tier_ram_hits, (unsigned long long)ks.tier_disk_hits,
                (unsigned long long)ks.tier_bytes_read, (double)ks.tier_restore_ns * 1e-6,
                (unsigned long long)ks.tier_bytes_written);
}

/* The text after a command word: NULL when none. */
static const char *argument(const char *line, size_t word) {
    const char *a = line + word;
    while (*a == ' ' || *a == '\t') a++;
    return *a ? a : NULL;
}

int chat_command(chat_state *st, const char *line) {
    size_t word = strcspn(line, " \t");
    const char *arg = argument(line, word);
#define IS(name) (word == strlen(name) && !strncmp(line, name, word))
    if (IS("/help")) {
        chat_help(st, st->info);
    } else if (IS("/quit") || IS("/exit")) {
        st->quit = 1;
    } else if (IS("/reset")) {
        chat_conv_reset(&st->conv);
        chat_state_forget_ids(st);
        fprintf(st->info, "new conversation%s\n", chat_conv_len(&st->conv) ? " (the system message stays)" : "");
    } else if (IS("/system")) {
        chat_state_forget_ids(st);
        if (chat_conv_set_system(&st->conv, arg)) {
            fputs("out of memory\n", st->info);
            return -1;
        }
        fputs(arg ? "system message set\n" : "system message removed\n", st->info);
    } else if (IS("/stats")) {
        print_stats(st);
    } else if (IS("/save") || IS("/load")) {
        if (!arg) {
            fprintf(st->info, "%.*s needs a file name: %.*s FILE\n", (int)word, line, (int)word, line);
            return -1;
        }
        return IS("/save") ? save(st, arg) : load(st, arg);
    } else if (IS("/reasoning")) {
        if (arg && (!strcmp(arg, "show") || !strcmp(arg, "hide"))) st->reasoning = !strcmp(arg, "show");
        else if (arg) {
            fprintf(st->info, "/reasoning: show or hide, not '%s'\n", arg);
            return -1;
        }
        fprintf(st->info, "reasoning %s\n", st->reasoning ? "shown" : "hidden");
    } else if (IS("/models")) {
        chat_models_print(st->models, st->info);
    } else if (IS("/model")) {
        return chat_models_switch(st->models, st, arg);
    } else {
        fprintf(st->info, "unknown command '%.*s' (/help lists the commands)\n", (int)word, line);
        return -1;
    }
#undef IS
    return 0;
}

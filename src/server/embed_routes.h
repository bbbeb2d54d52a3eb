/*
 * POST /v1/embeddings (docs/server.md): OpenAI's embeddings endpoint over
 * the library's kvlm_embed. The HTTP thread parses the body
 * (app/embed_request.h) into a job; the engine thread runs it between two
 * scheduler steps, a slice of inputs (at most the server's
 * max_batch_tokens tokens, at least one input) per loop turn, each slice
 * in as few engine steps as the free sequence slots and blocks allow, on
 * scratch sequences freed at once: running requests keep their blocks
 * and keep decoding between slices. The vectors are L2-normalised (cut to
 * `dimensions` and renormalised when asked) and sent as JSON numbers or
 * base64 float32.
 *
 * Always on (no --embeddings switch): every model kvlm runs is a decoder
 * and can embed; the pooling is the model's files' (kvlm_model_pooling)
 * unless the server was started with --pooling.
 */
#ifndef KVLM_SERVER_EMBED_ROUTES_H
#define KVLM_SERVER_EMBED_ROUTES_H

#include <stddef.h>

#include "server/routes.h"

typedef struct embed_job embed_job;

/* HTTP thread: the job for the engine (r->j), or an error reply. */
void embed_route(srv *s, const char *body, size_t len, reply *r);
/* Engine thread: runs the next slice of the job's inputs. Returns 0 when
 * the job is answered (*body, the JSON answer, or e filled), 1 when no
 * sequence slot or blocks are free now (retry after a step), 2 when inputs
 * remain (call again after the next step). */
int embed_run(srv *s, job *j, char **body, api_error *e);
void embed_job_free(embed_job *ej);

#endif

/*
 * Reading what the user types to `kvlm chat`. One message is one line; a
 * line ending in a backslash continues on the next (the backslash becomes
 * a newline), so a message may span lines.
 *
 * On a terminal, from chat_input_open to chat_input_close, the terminal
 * is in non-canonical mode without echo, so that keys mean what a chat
 * needs: Enter ends the line, Backspace deletes a character (a whole UTF-8
 * character), Ctrl-U the line, Ctrl-C drops what was typed or, at an empty
 * prompt, exits, Ctrl-D at an empty prompt exits; other control keys and
 * escape sequences (arrows) are ignored. Between lines (while a reply
 * streams) Ctrl-C raises SIGINT, and keys typed ahead wait, unechoed, for
 * the next line. SIGTERM and SIGHUP restore the terminal before they end
 * the process.
 *
 * Anything else (a pipe, a file) is read line by line, no prompt shown.
 */
#ifndef KVLM_CLI_CHAT_INPUT_H
#define KVLM_CLI_CHAT_INPUT_H

#include <stddef.h>
#include <stdio.h>
#include <termios.h>

typedef struct chat_input {
    FILE *in;
    int fd;
    int tty;                /* in is a terminal */
    struct termios saved;   /* its own settings */
    FILE *echo;             /* where prompts and typed characters go (the terminal) */
    const char *prompt, *more;  /* the prompt, and the one of a continued line */
} chat_input;

typedef enum chat_read {
    CHAT_READ_MESSAGE,      /* a message (possibly empty) */
    CHAT_READ_END,          /* end of input, Ctrl-D or Ctrl-C at an empty prompt */
    CHAT_READ_ERROR,        /* out of memory or a read error (errno) */
} chat_read;

void chat_input_open(chat_input *ci, FILE *in, FILE *echo);
/* Gives the terminal its own settings back. */
void chat_input_close(chat_input *ci);
/* The next message (NUL-terminated, malloc'ed, without its final newline). */
chat_read chat_input_read(const chat_input *ci, char **text, size_t *len);

#endif

/* Reading a chat message from a terminal or a stream (see chat_input.h). */
#include "cli/chat_input.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/sbuf.h"

#define KEY_CTRL_C 3
#define KEY_CTRL_D 4
#define KEY_BACKSPACE 8
#define KEY_CTRL_U 21
#define KEY_ESC 27
#define KEY_DELETE 127

/* The terminal's own settings, for the signal handler below. */
static struct termios original;
static int original_fd = -1;

/* SIGTERM or SIGHUP while the terminal is in chat mode: restore it, then die of the signal. */
static void restore_and_die(int sig) {
    if (original_fd >= 0) tcsetattr(original_fd, TCSADRAIN, &original);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The terminal while chatting: keys reach the program unechoed and one by
 * one (typed ahead during a reply, they are echoed when the next line is
 * read); isig: Ctrl-C raises SIGINT (while a reply streams) or is a key. */
static void chat_mode(const chat_input *ci, int isig) {
    struct termios t = ci->saved;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO | IEXTEN | (isig ? 0 : ISIG));
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    tcsetattr(ci->fd, TCSADRAIN, &t); /* TCSADRAIN: keys typed ahead stay */
}

void chat_input_open(chat_input *ci, FILE *in, FILE *echo) {
    *ci = (chat_input){.in = in, .fd = fileno(in), .echo = echo, .prompt = ">>> ", .more = "... "};
    ci->tty = isatty(ci->fd) && tcgetattr(ci->fd, &ci->saved) == 0;
    if (!ci->tty) return;
    original = ci->saved;
    original_fd = ci->fd;
    signal(SIGTERM, restore_and_die);
    signal(SIGHUP, restore_and_die);
    chat_mode(ci, 1);
}

void chat_input_close(chat_input *ci) {
    if (!ci->tty) return;
    tcsetattr(ci->fd, TCSADRAIN, &ci->saved);
    original_fd = -1;
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
}

/* A byte from the terminal: the byte, -1 at end of input or on error. */
static int key(const chat_input *ci) {
    unsigned char c;
    for (;;) {
        ssize_t n = read(ci->fd, &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

/* Skips the rest of an escape sequence (ESC [ params final, ESC O x, ESC x). */
static void skip_escape(const chat_input *ci) {
    int c = key(ci);
    if (c == 'O') {
        key(ci);
    } else if (c == '[') {
        while ((c = key(ci)) >= 0 && !(c >= 0x40 && c <= 0x7e)) {
        }
    }
}

static void erase_chars(const chat_input *ci, size_t n) {
    while (n--) fputs("\b \b", ci->echo);
}

/* Bytes of the last UTF-8 character of line. */
static size_t last_char(const sbuf *line) {
    size_t k = line->len;
    while (k > 0 && ((unsigned char)line->data[k - 1] & 0xc0) == 0x80) k--;
    return k > 0 ? line->len - k + 1 : line->len;
}

/* One line from the terminal into line: 1 a line, 0 the end (Ctrl-D or
 * Ctrl-C at an empty message, end of input), 2 Ctrl-C dropped the message. */
static int tty_line(const chat_input *ci, sbuf *line, int message_empty) {
    chat_mode(ci, 0);
    int rc = 1;
    size_t shown = 0; /* characters echoed on this line */
    for (;;) {
        fflush(ci->echo);
        int c = key(ci);
        if (c < 0) {
            rc = 0;
            break;
        }
        if (c == '\n' || c == '\r') break;
        if (c == KEY_CTRL_C) {
            rc = message_empty && line->len == 0 ? 0 : 2;
            fputs("^C", ci->echo);
            break;
        }
        if (c == KEY_CTRL_D) {
            if (message_empty && line->len == 0) {
                rc = 0;
                break;
            }
            continue;
        }
        if (c == KEY_DELETE || c == KEY_BACKSPACE) {
            if (line->len) {
                line->len -= last_char(line);
                line->data[line->len] = 0;
                erase_chars(ci, 1);
                shown--;
            }
        } else if (c == KEY_CTRL_U) {
            erase_chars(ci, shown);
            shown = 0;
            line->len = 0;
            if (line->data) line->data[0] = 0;
        } else if (c == KEY_ESC) {
            skip_escape(ci);
        } else if (c >= 0x20 || c == '\t') {
            char b = (char)c;
            sbuf_add(line, &b, 1);
            fputc(c, ci->echo);
            if ((c & 0xc0) != 0x80) shown++; /* a continuation byte is not a character */
        }
    }
    fputc('\n', ci->echo);
    fflush(ci->echo);
    chat_mode(ci, 1);
    return rc;
}

/* One line from a stream: 1 a line, 0 the end. */
static int stream_line(const chat_input *ci, sbuf *line) {
    int c, any = 0;
    while ((c = getc(ci->in)) != EOF && c != '\n') {
        char b = (char)c;
        sbuf_add(line, &b, 1);
        any = 1;
    }
    if (line->len && line->data[line->len - 1] == '\r') line->data[--line->len] = 0; /* CRLF input */
    return any || c == '\n';
}

chat_read chat_input_read(const chat_input *ci, char **text, size_t *len) {
    sbuf msg = {0};
    int started = 0; /* a continued line is in msg */
    *text = NULL;
    *len = 0;
    for (;;) {
        sbuf line = {0};
        if (ci->tty) fputs(started ? ci->more : ci->prompt, ci->echo);
        const int rc = ci->tty ? tty_line(ci, &line, !started) : stream_line(ci, &line);
        if (rc == 2) { /* Ctrl-C: the message is dropped, start over */
            sbuf_free(&line);
            sbuf_free(&msg);
            started = 0;
            continue;
        }
        if (rc == 0 && !started) {
            sbuf_free(&line);
            sbuf_free(&msg);
            return CHAT_READ_END;
        }
        const int more = rc == 1 && line.len && line.data[line.len - 1] == '\\';
        sbuf_add(&msg, line.data ? line.data : "", line.len - (size_t)more);
        if (more) sbuf_add(&msg, "\n", 1);
        sbuf_free(&line);
        if (msg.failed) {
            sbuf_free(&msg);
            return CHAT_READ_ERROR;
        }
        if (!more) break; /* a whole line, or the end of input after a continued one */
        started = 1;
    }
    *text = msg.data ? msg.data : strdup("");
    *len = msg.len;
    return *text ? CHAT_READ_MESSAGE : CHAT_READ_ERROR;
}

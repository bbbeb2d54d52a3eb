#!/usr/bin/env python3
"""Expected renderings of the chat-template fixtures, made with Python's
jinja2 configured as Hugging Face transformers' apply_chat_template
configures it: an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension; raise_exception(msg) raising
TemplateError(msg); strftime_now(fmt) formatting a fixed date (so the
fixtures are deterministic); a tojson filter that is json.dumps with
ensure_ascii=False; and a pass-through {% generation %} block.

    /usr/bin/python3 tools/template_reference.py tests/fixtures/templates

reads DIR/manifest.json and DIR/conversations.json and writes
DIR/expected.json: for every template and conversation either
{"output": text} or {"error": message, "raised": true|false} (raised: the
template called raise_exception, whose message kvlm must repeat exactly).
The variables are messages, add_generation_prompt, tools (None when the
conversation has none, as transformers passes it), documents (None),
bos_token and eos_token, and the conversation's own "variables" object
when it has one (e.g. {"enable_thinking": false}, as transformers passes
apply_chat_template's extra keyword arguments).

    /usr/bin/python3 tools/template_reference.py render FILE.jinja CONV.json
prints one rendering (for debugging).
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The date strftime_now formats: 2024-07-26 12:34:56 UTC (epoch 1721997296).
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 34, 56)


class Generation(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, text, conv, bos, eos):
    try:
        # a conversation's "variables" are further template variables (the
        # chat_template_kwargs of a request: enable_thinking, thinking...)
        variables = dict(conv.get("variables", {}))
        out = env.from_string(text).render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                                           add_generation_prompt=conv["add_generation_prompt"],
                                           bos_token=bos, eos_token=eos, **variables)
        return {"output": out}
    except TemplateError as e:
        raised = type(e) is TemplateError
        msg = e.message if raised else f"{type(e).__name__}: {e}"
        return {"error": msg, "raised": raised}
    except Exception as e:  # jinja2 lets Python errors through (TypeError...)
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    env = environment()
    if sys.argv[1] == "render":
        with open(sys.argv[2], encoding="utf-8") as f:
            text = f.read()
        with open(sys.argv[3], encoding="utf-8") as f:
            conv = json.load(f)
        print(json.dumps(render(env, text, conv, "<s>", "</s>"), ensure_ascii=False, indent=1))
        return
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(os.path.join(d, "conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    expected = {}
    for t in manifest:
        with open(os.path.join(d, t["file"]), encoding="utf-8") as f:
            text = f.read()
        expected[t["name"]] = {name: render(env, text, conv, t["bos_token"], t["eos_token"])
                               for name, conv in convs.items()}
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "python": sys.version.split()[0], "expected": expected}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for t in expected.values() for r in t.values() if "error" in r)
    print(f"{len(manifest)} templates x {len(convs)} conversations, {n_err} errors; jinja2 {jinja2.__version__}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""llama-server's reading of harmony texts, for comparing with kvlm's.

llama-server takes no custom grammar with tools, so each text is forced
without tools: a GBNF grammar of its pieces (the format's markers as
special tokens, the rest as literals) makes the model write exactly the
text, and the chat response shows how llama-server split it into
reasoning_content, content and tool_calls. The texts end before
<|return|> / <|call|> (stop tokens: the grammar ends, the model stops).

    llama-server -m tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf (context raised to 1024) --jinja \\
        --chat-template-file tests/fixtures/templates/openai-gpt-oss-120b.jinja --port 18432 &
    python3 tools/harmony_llamacpp.py 18432

prints each text and llama-server's fields (docs/tools.md, "Harmony",
lists how they differ from kvlm's; tests/test_harmony.c has kvlm's).
"""
import json
import re
import sys
import urllib.error
import urllib.request

MARKER = re.compile(r"(<\|(?:start|channel|message|constrain|end|call|return)\|>)")

TEXTS = [
    "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
    "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
    " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Lyon\"}",
    "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"A\"}",
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": oops",
    "Just text, no channels <| here.\nSecond line.",
    "<|channel|>final<|message|>a <b> c",
]


def gbnf(text):
    items = [p if MARKER.fullmatch(p) else json.dumps(p) for p in MARKER.split(text) if p]
    return "root ::= " + " ".join(items)


def ask(port, text):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400, "temperature": 0, "grammar": gbnf(text)}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        r = json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        return {"error": e.read().decode()[:300]}
    m = r["choices"][0]["message"]
    return {k: m.get(k) for k in ("content", "reasoning_content", "tool_calls")}


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 18432
    for t in TEXTS:
        print(json.dumps(t))
        print("   ", json.dumps(ask(port, t)))


if __name__ == "__main__":
    main()

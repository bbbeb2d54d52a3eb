#!/usr/bin/env python3
"""How often constrained outputs parse when max_tokens binds.

Runs `kvlm run` on the shipped GPT-2 (models/shakespeare-gpt2, which never
closes a JSON string on its own) for four response formats (any JSON
object as the schema {"type":"object"}, a JSON Schema, a GBNF grammar and a
regular expression), each at budgets just above its shortest output and at
a larger one, sampled at temperature 0.9 over SEEDS seeds, and checks each
output with an independent reader: Python's json and jsonschema, a small
recursive-descent parser for the GBNF's language and Python's re for the
regex. Prints one table row per format and budget with the count of valid
outputs for each kvlm binary given (e.g. a build before and after a
change):

    bench/structured_budget.py /work/main/build/kvlm build/kvlm

A binary that refuses a budget (exit 2: below the shortest output) is
counted as refused, not as invalid. Not part of `make test`
(tests/test_grammar_budget.c asserts the counts for the current build).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

MODEL = "models/shakespeare-gpt2"
SEEDS = 8
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "minLength": 3}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}
GBNF = 'root ::= list\nlist ::= "(" item (" " item)* ")"\nitem ::= [a-z]+ | list\n'
REGEX = r"[A-Z][a-z]+(, [a-z]+)* \(([0-9]{2,4}|n/a)\)"


def gbnf_valid(text):
    """The language of GBNF above: ( item ( ' ' item )* ), item a word or a list."""
    def item(i):
        if i < len(text) and text[i] == "(":
            return lst(i)
        j = i
        while j < len(text) and "a" <= text[j] <= "z":
            j += 1
        return j if j > i else -1

    def lst(i):
        if i >= len(text) or text[i] != "(":
            return -1
        i = item(i + 1)
        while i >= 0 and i < len(text) and text[i] == " ":
            i = item(i + 1)
        return i + 1 if i >= 0 and i < len(text) and text[i] == ")" else -1

    return lst(0) == len(text)


def json_valid(schema):
    def check(text):
        try:
            jsonschema.validate(json.loads(text), schema)
            return True
        except (ValueError, jsonschema.ValidationError):
            return False
    return check


def main():
    bins = sys.argv[1:] or ["build/kvlm"]
    tmp = tempfile.mkdtemp()
    obj, sch, gram = (os.path.join(tmp, n) for n in ("object.json", "schema.json", "g.gbnf"))
    json.dump({"type": "object"}, open(obj, "w"))
    json.dump(SCHEMA, open(sch, "w"))
    open(gram, "w").write(GBNF)
    formats = [  # name, flag, argument, checker, budgets (shortest output + 0 and + 3, and a larger one)
        ("json_object", "--json-schema", obj, json_valid({"type": "object"}), [2, 5, 100]),
        ("json_schema", "--json-schema", sch, json_valid(SCHEMA), [32, 35, 60]),
        ("gbnf", "--grammar", gram, gbnf_valid, [3, 6, 40]),
        ("regex", "--regex", REGEX, lambda t: re.fullmatch(REGEX, t) is not None, [7, 10, 40]),
    ]
    print(f"| format | max_tokens | {' | '.join(bins)} |")
    print("| --- | --- |" + " --- |" * len(bins))
    for name, flag, arg, ok, budgets in formats:
        for n in budgets:
            cells = []
            for b in bins:
                good = refused = 0
                for seed in range(SEEDS):
                    r = subprocess.run([b, "run", "-m", MODEL, "-p", "ROMEO:", "-n", str(n), "--temp", "0.9",
                                        "--seed", str(seed), flag, arg, "--json"], capture_output=True, text=True)
                    if r.returncode == 2:
                        refused += 1
                        continue
                    good += ok(json.loads(r.stdout)["text"])
                cells.append(f"{good}/{SEEDS}" + (f" ({refused} refused)" if refused else ""))
            print(f"| {name} | {n} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()

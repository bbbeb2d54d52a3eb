#!/usr/bin/python3
"""Checks generated outputs against their JSON Schemas with an independent
validator (python3-jsonschema, Draft 2020-12, formats checked).

Usage: validate_json_outputs.py CASES.jsonl
Each line: {"schema": <schema>, "output": "<generated text>", "id": "..."}.
Prints one line per invalid output and a summary; exit status 1 when any
output does not parse as JSON or does not validate, 2 on a usage error.
"""
import json
import sys

import jsonschema


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    total = bad = 0
    with open(sys.argv[1], "rb") as f:
        for raw in f:
            case = json.loads(raw)
            total += 1
            try:
                value = json.loads(case["output"])
            except ValueError as e:
                bad += 1
                print("%s: not JSON (%s): %r" % (case.get("id"), e, case["output"]))
                continue
            errors = list(jsonschema.Draft202012Validator(case["schema"], format_checker=checker).iter_errors(value))
            if errors:
                bad += 1
                print("%s: invalid: %s\n  output %r\n  schema %s" % (case.get("id"), errors[0].message, case["output"],
                                                                  json.dumps(case["schema"])))
    print("validated %d outputs, %d invalid" % (total, bad))
    return 1 if bad or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

"""Validates model replies against JSON schemas (tests/server_structured.rs).

stdin: a JSON list of {"label", "schema", "text"}. Each text must parse as
JSON and be valid against its schema (Draft 2020-12). Prints one line per
item; exits 1 if any fails.
"""

import json
import sys

import jsonschema


def main() -> int:
    failed = 0
    for item in json.load(sys.stdin):
        label, schema, text = item["label"], item["schema"], item["text"]
        try:
            value = json.loads(text)
            jsonschema.Draft202012Validator.check_schema(schema)
            jsonschema.Draft202012Validator(schema).validate(value)
        except (ValueError, jsonschema.ValidationError) as error:
            failed += 1
            print(f"FAIL {label}: {error}\n  text: {text!r}")
            continue
        print(f"ok   {label}: {text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

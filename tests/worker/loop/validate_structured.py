"""Validates constrained outputs with the reference JSON Schema implementation (jsonschema).

Reads JSON lines {"schema": <schema or null for any object>, "output": "...", "complete": bool}
and prints one JSON summary: complete outputs, how many validate, and the first failures. Exits
1 when a complete output does not parse or validate. Run with .venv/bin/python.
"""
import json
import sys

import jsonschema


def main(path):
    complete = valid = 0
    failures = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if not rec["complete"]:
                continue
            complete += 1
            try:
                value = json.loads(rec["output"])
                if rec["schema"] is None:
                    if not isinstance(value, dict):
                        raise ValueError("not an object")
                else:
                    jsonschema.validate(value, rec["schema"],
                                        cls=jsonschema.Draft202012Validator,
                                        format_checker=jsonschema.FormatChecker())
                valid += 1
            except Exception as e:  # noqa: BLE001 - any failure is reported
                failures.append({"output": rec["output"], "error": str(e)[:200]})
    print(json.dumps({"complete": complete, "valid": valid, "failures": failures[:5]}))
    return 0 if valid == complete else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

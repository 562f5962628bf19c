#!/usr/bin/env python3
"""Functions short enough to read at once: no host function over 80 lines.

The project's habit (STYLE.md, the developers' guide) in a check: every function defined at
namespace level in the host code (common/, router/, tools/, worker/; .cc and .h) is at most
--max-lines long, from the line that starts its signature to its closing brace. The scan is
textual and follows clang-format's Google layout: a definition starts at column 0 and its body
ends with a "}" at column 0. Kernels (.cu, .cuh under kernels/) are left out: a kernel's body is
one launch's code, split into device functions when it is next changed on a device; tests are
left out too (a test's table of cases is read as a table). Run by ctest as style.function_length.
"""
import argparse
import os
import re
import sys

SKIP = re.compile(r'(namespace|struct|class|enum|extern|union|using|typedef|template|'
                  r'static_assert)\b|[#/]')


def long_functions(path, max_lines):
    """(length, first line, signature) of each definition in `path` longer than max_lines."""
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    found, state, start = [], None, 0
    for i, line in enumerate(lines):
        text = line.rstrip()
        if state is None:
            if (line and not line[0].isspace() and not SKIP.match(line) and
                    not line.startswith('}') and '(' in line):
                start = i
                state = None if text.endswith(';') else 'body' if text.endswith('{') else 'sig'
        elif state == 'sig':
            if text.endswith(';') or (line and not line[0].isspace()):
                state = None
            elif text.endswith('{'):
                state = 'body'
        elif line.startswith('}'):
            if i - start + 1 > max_lines:
                found.append((i - start + 1, start + 1, lines[start].strip()))
            state = None
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--root', required=True, help='the source tree')
    parser.add_argument('--max-lines', type=int, default=80)
    args = parser.parse_args()
    failures = []
    for top in ('common', 'router', 'tools', 'worker'):
        for dirpath, _, names in os.walk(os.path.join(args.root, top)):
            for name in sorted(names):
                if not name.endswith(('.cc', '.h')):
                    continue
                path = os.path.join(dirpath, name)
                for length, line, signature in long_functions(path, args.max_lines):
                    rel = os.path.relpath(path, args.root)
                    failures.append(f'{rel}:{line}: {length} lines: {signature[:70]}')
    for f in sorted(failures):
        print(f)
    if failures:
        print(f'{len(failures)} function(s) over {args.max_lines} lines: split them '
              '(one step a function, as the file around them does)', file=sys.stderr)
        return 1
    print(f'every host function is at most {args.max_lines} lines')
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/python3
"""Reads the verbose output of rdma-core's tests/run_tests.py (unittest -v) and prints each
test's outcome and the counts; with --expect FILE, exits 1 when a test the file lists did not
pass (the file: one test id per line, "module.Class.test", # comments).

    results.py LOG [--expect FILE] [--list OUT]
"""
import re
import sys

# "test_x (tests.test_mod.Class.test_x)" opens a test; its outcome follows " ... " on the same
# line or on the next (a docstring's first line comes between). A tearDown error reports the
# test again: the worst outcome counts.
HEAD = re.compile(r'^(test\w*) \(tests\.([\w.]+)\)')
WORDS = r'(ok|FAIL|ERROR|skipped|expected failure|unexpected success)'
OUTCOME = re.compile(r' \.\.\. ' + WORDS)
# The outcome alone on a line: something (the provider's first message) wrote after " ... ".
BARE = re.compile(r'^' + WORDS + r'(\s|$)')
RANK = {'ok': 0, 'skipped': 1, 'expected failure': 1, 'FAIL': 2, 'unexpected success': 2,
        'ERROR': 3}


def parse(path):
    outcomes, order, current = {}, [], None
    with open(path, errors='replace') as f:
        for line in f:
            h = HEAD.match(line)
            if h:
                current = h.group(2)
                if current not in outcomes:
                    order.append(current)
            o = OUTCOME.search(line) or (BARE.match(line) if current else None)
            if o and current:
                new = o.group(1)
                old = outcomes.get(current)
                if old is None or RANK[new] > RANK[old]:
                    outcomes[current] = new
                if not h:
                    current = None
    return outcomes, order


def main():
    args = sys.argv[1:]
    log = args[0]
    expect = args[args.index('--expect') + 1] if '--expect' in args else None
    out = args[args.index('--list') + 1] if '--list' in args else None
    outcomes, order = parse(log)
    counts = {'ok': 0, 'skipped': 0, 'FAIL': 0, 'ERROR': 0}
    for t in order:
        o = outcomes.get(t, 'ERROR')
        key = {'expected failure': 'skipped', 'unexpected success': 'FAIL'}.get(o, o)
        counts[key] += 1
    print(f"rdma-core tests: {len(order)} run: {counts['ok']} passed, {counts['skipped']} "
          f"skipped, {counts['FAIL']} failed, {counts['ERROR']} errors")
    if out:
        with open(out, 'w') as f:
            for t in order:
                f.write(f'{t} {outcomes.get(t, "ERROR")}\n')
    if not expect:
        return 0
    wanted = []
    with open(expect) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                wanted.append(line)
    bad = [t for t in wanted if outcomes.get(t) != 'ok']
    for t in bad:
        print(f'FAIL: expected to pass: {t}: {outcomes.get(t, "not run")}')
    extra = [t for t in order if outcomes[t] == 'ok' and t not in wanted]
    for t in extra:
        print(f'note: passes, not in the expected list: {t}')
    print(f'{len(wanted) - len(bad)} of {len(wanted)} expected passes passed')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

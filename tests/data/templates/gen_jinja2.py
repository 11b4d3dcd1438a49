#!/usr/bin/env python3
"""Renders every case of cases.jsonl (written by gen.mjs with @huggingface/jinja) again with
Python's jinja2 set up as transformers sets it up (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, tojson through json.dumps with ensure_ascii=False,
raise_exception, strftime_now at the same fixed time, the generation tag as a no-op), and
adds "jinja2_rendered" or "jinja2_error" to each case where the two disagree (both failing
counts as agreeing). Not run by make test.
Usage: python3 tests/data/templates/gen_jinja2.py tests/data/templates"""
import json, re, sys
from datetime import datetime
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

d = sys.argv[1] if len(sys.argv) > 1 else '.'
templates = json.load(open(f'{d}/templates.json'))


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime(2026, 1, 15, 10, 30).strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters['tojson'] = tojson
env.globals['raise_exception'] = raise_exception
env.globals['strftime_now'] = strftime_now
GEN = re.compile(r'{%-?\s*(end)?generation\s*-?%}')
compiled = {}
cases = [json.loads(line) for line in open(f'{d}/cases.jsonl')]
disagree = 0
for case in cases:
    name = case['template']
    try:
        if name not in compiled:
            compiled[name] = env.from_string(GEN.sub('', templates[name]['chat_template']))
        got = {'jinja2_rendered': compiled[name].render(**case['vars'])}
    except Exception as e:  # noqa: BLE001 - any template failure is a reference error
        got = {'jinja2_error': f'{type(e).__name__}: {e}'}
    case.pop('jinja2_rendered', None)
    case.pop('jinja2_error', None)
    same = ('error' in case and 'jinja2_error' in got) or \
        case.get('rendered') == got.get('jinja2_rendered', object())
    if not same:
        case.update(got)
        disagree += 1
with open(f'{d}/cases.jsonl', 'w') as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=False) + '\n')
print(len(cases), 'cases,', disagree, 'where jinja2 and @huggingface/jinja disagree')
